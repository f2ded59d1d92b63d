//! A private PKI for TLS tests, made fresh by rcgen in a temporary
//! directory: a CA; a replica certificate for 127.0.0.1 and localhost that
//! serves and also identifies the replica to its peers; an agent's client
//! certificate; and a rogue CA with a client certificate of its own, which
//! replicas must not accept. Keys are written owner-only, as gpumon
//! requires.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, as files.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files of one test PKI; removed on drop.
#[derive(Debug)]
pub struct Pki {
    _dir: tempfile::TempDir,
    /// The CA certificate every party trusts.
    pub ca: PathBuf,
    /// Each replica's certificate (server and client use).
    pub replica: Pair,
    /// The agent's and CLI's client certificate.
    pub agent: Pair,
    /// A client certificate from a CA nobody trusts.
    pub rogue: Pair,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn leaf(
    dir: &Path,
    name: &str,
    issuer: &CertifiedIssuer<'static, KeyPair>,
    sans: &[&str],
    uses: Vec<ExtendedKeyUsagePurpose>,
) -> Pair {
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = uses;
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    Pair {
        cert: write(dir, &format!("{name}.pem"), &cert.pem(), 0o644),
        key: write(dir, &format!("{name}.key"), &key.serialize_pem(), 0o600),
    }
}

/// A fresh PKI.
pub fn make() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let trusted = ca("gpumon test CA");
    let rogue_ca = ca("rogue CA");
    let both = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let client = vec![ExtendedKeyUsagePurpose::ClientAuth];
    Pki {
        ca: write(dir.path(), "ca.pem", &trusted.pem(), 0o644),
        replica: leaf(
            dir.path(),
            "replica",
            &trusted,
            &["127.0.0.1", "localhost"],
            both,
        ),
        agent: leaf(dir.path(), "agent", &trusted, &["agent-1"], client.clone()),
        rogue: leaf(dir.path(), "rogue", &rogue_ca, &["agent-1"], client),
        _dir: dir,
    }
}

impl Pki {
    /// A client that trusts the test CA and, with `identity`, presents it.
    pub fn client(&self, identity: Option<&Pair>) -> reqwest::Client {
        let tls = gpumon_net::ClientTls {
            ca_file: Some(self.ca.clone()),
            identity: identity.map(|p| gpumon_net::Identity {
                cert_file: p.cert.clone(),
                key_file: p.key.clone(),
            }),
        };
        gpumon_net::client_builder(&tls)
            .unwrap()
            .timeout(super::cluster::REQUEST_TIMEOUT)
            .build()
            .unwrap()
    }
}
