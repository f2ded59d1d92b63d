//! The hook endpoint over loopback TCP with the real `/proc`: the agent
//! finds the process behind each connection (`/proc/net/tcp*` and
//! `/proc/*/fd`) and holds it to the rules of a Unix socket peer: it may
//! register only its own PID, it counts against its own user's share of
//! connections, and its exit is seen.

mod support;

use gpumon_agent::discovery::standalone_job;
use gpumon_agent::hook_endpoint::{HookAddr, MAX_CONNECTIONS_PER_USER};
use serde_json::{json, Value};
use support::*;

/// Loopback addresses to serve on: IPv4, and IPv6 where the machine has it.
fn loopbacks() -> Vec<&'static str> {
    let mut hosts = vec!["127.0.0.1:0"];
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        hosts.push("[::1]:0");
    }
    hosts
}

/// Runs the Python `script` with the server's host and port and `args` as
/// its arguments, in a clean environment, and parses the JSON it prints.
async fn python_on_tcp(server: &Server, script: &str, args: &[String]) -> (u32, Value) {
    let addr = server.addr.tcp_addr().unwrap();
    let child = tokio::process::Command::new("python3")
        .args(["-c", script])
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs (the test command installs it)");
    let pid = child.id().unwrap();
    let out = bounded(child.wait_with_output()).await.unwrap();
    let answer = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (pid, answer)
}

/// The job of the first rank the server reports as exited (its process
/// is gone after its connection closed: only a session whose PID the
/// kernel vouched for is watched).
async fn exited(server: &Server) -> String {
    let mut exits = server.process_exits().await;
    assert_eq!(exits.len(), 1, "{exits:?}");
    assert_eq!(exits[0].rank, 0);
    exits.remove(0).job
}

/// Connects over TCP (`argv[1]`, `argv[2]`), sends each claim of the JSON
/// list `argv[3]`, then its own claim, and prints the answers.
const CLAIMS_SCRIPT: &str = r#"
import json, os, socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
f = s.makefile("rwb")
def call(claim):
    f.write(json.dumps(claim).encode() + b"\n")
    f.flush()
    return json.loads(f.readline())
own = {"v": 1, "op": "register", "pid": os.getpid(), "job": "pid-%d" % os.getpid(),
       "rank": 0, "local_rank": 0, "world_size": 1}
print(json.dumps([call(c) for c in json.loads(sys.argv[3])] + [call(own)]))
"#;

/// A process on loopback TCP claiming the test process (whose own claim
/// it copies, so its environment agrees), or a PID that does not exist, is
/// refused and told its own PID; its own claim is accepted, and the
/// session is the process's, watched like a Unix peer's.
#[tokio::test]
async fn a_tcp_peer_may_register_only_its_own_pid() {
    for host in loopbacks() {
        let server = Server::start(host, None).await;
        let me = std::process::id();
        let theirs = own_claim().register(None);
        let nobody = json!({"v": 1, "op": "register", "pid": 999_999_999u32, "job": "run-7",
                            "rank": 0, "local_rank": 0, "world_size": 1});
        let claims = json!([theirs, nobody]).to_string();
        let (child, answers) = python_on_tcp(&server, CLAIMS_SCRIPT, &[claims]).await;
        let needle = |pid: u32| {
            format!("pid {pid} is not the connecting process (the kernel says pid {child})")
        };
        assert_refused(&answers[0], &needle(me));
        assert_refused(&answers[1], &needle(999_999_999));
        assert_ok(&answers[2]);
        let stats = server.hub.stats();
        assert_eq!((stats.refused, stats.tcp_peers_unknown), (2, 0), "{host}");
        // The child has exited by now: its session ends and, its PID being
        // vouched for, its exit is reported.
        assert_eq!(exited(&server).await, standalone_job(child), "{host}");
        server.stop().await;
    }
}

/// A process that forks after connecting shares its socket with the
/// child: the child may register itself on it, as the process it is.
#[tokio::test]
async fn a_fork_of_a_tcp_peer_may_register_itself() {
    let server = Server::start("127.0.0.1:0", None).await;
    let script = r#"
import json, os, socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
child = os.fork()
if child == 0:
    me = os.getpid()
    f = s.makefile("rwb")
    claim = {"v": 1, "op": "register", "pid": me, "job": "pid-%d" % me,
             "rank": 0, "local_rank": 0, "world_size": 1}
    f.write(json.dumps(claim).encode() + b"\n")
    f.flush()
    print(json.dumps({"pid": me, "answer": json.loads(f.readline())}), flush=True)
    os._exit(0)
os.waitpid(child, 0)
"#;
    let (parent, out) = python_on_tcp(&server, script, &[]).await;
    assert_ok(&out["answer"]);
    let child = u32::try_from(out["pid"].as_u64().unwrap()).unwrap();
    assert_ne!(child, parent);
    assert_eq!(exited(&server).await, standalone_job(child));
    server.stop().await;
}

/// This process over TCP is itself: its own claim stands, another PID's
/// (even one that does not exist) does not.
#[tokio::test]
async fn this_process_over_tcp_is_itself() {
    for host in loopbacks() {
        let server = Server::start(host, None).await;
        let mut c = server.connect().await;
        let me = std::process::id();
        let answer = c.call(register(me + 1, "run-7", 0, None)).await;
        assert_refused(
            &answer,
            &format!(
                "pid {} is not the connecting process (the kernel says pid {me})",
                me + 1
            ),
        );
        assert_ok(&c.register_as_myself().await);
        let sessions = server.hub.sessions();
        assert_eq!(sessions[0].registration.pid, me, "{host}");
        assert_eq!(server.hub.stats().tcp_peers_unknown, 0, "{host}");
        server.stop().await;
    }
}

/// A `/proc` without the tables (the test servers' empty one) leaves a TCP
/// peer unknown, as before: counted, and its claim checked against the
/// claimed process's environment only.
#[tokio::test]
async fn a_tcp_peer_that_cannot_be_found_is_unknown_and_counted() {
    let server = Server::tcp().await;
    let mut c = server.connect().await;
    assert_ok(&c.call(register(4242, "run-7", 0, None)).await);
    assert_eq!(server.hub.stats().tcp_peers_unknown, 1);
    server.stop().await;
}

/// One local user holding its share of TCP connections (this test, as
/// root) is refused past it, and another user (a child process that drops
/// to uid 65534) still connects and registers as itself: loopback TCP is
/// no longer one user.
#[tokio::test]
async fn tcp_connections_count_against_their_own_users_share() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: needs root to run a process as another user");
        return;
    }
    let server = Server::start("127.0.0.1:0", None).await;
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS_PER_USER {
        held.push(server.connect().await);
    }
    let mut extra = server.connect().await;
    let answer = extra.read().await.expect("a refusal");
    assert_refused(&answer, "of this user's");
    assert!(extra.read().await.is_none(), "closed");

    // Imports first: the modules may not be readable by that user.
    let script = format!(
        "import encodings.idna, json, os, socket, sys\nos.setgid(65534)\nos.setuid(65534)\n{CLAIMS_SCRIPT}"
    );
    let (child, answers) = python_on_tcp(&server, &script, &["[]".to_owned()]).await;
    assert_ok(&answers[0]);
    assert_eq!(server.hub.stats().tcp_peers_unknown, 0);
    assert_eq!(
        exited(&server).await,
        standalone_job(child),
        "found by its pid"
    );
    drop(held);
    server.stop().await;
}

#[test]
fn the_tcp_endpoint_is_loopback_only() {
    for bad in ["0.0.0.0:7071", "[::]:7071", "192.168.1.5:7071"] {
        let e = bad.parse::<HookAddr>().unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains("not loopback"), "{e}");
    }
}
