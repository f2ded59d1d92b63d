//! Passing alerts on to the training processes, as an agent does with its
//! coordinators' replies: the embedded engine's active alerts about this
//! node (its ranks, its GPUs, its host RAM; most severe first, at most
//! [`MAX_NODE_ALERTS`]) go to the hook hub after each window set, which
//! posts each once per severity to its rank's hooks, or to every job's when
//! it names no rank (`gpumon.on_alert` callbacks run at the next step
//! boundary). The actions it issues (a hung job's evidence dumps) go to
//! the hub the same way an agent's coordinators' replies do.

use gpumon_agent::hook_endpoint::HookHub;
use gpumon_proto::MAX_NODE_ALERTS;

use super::embedded::Embedded;

/// Hands the actions the embedded engine issued to `hub` (evidence dumps
/// of a hung job, which the hooks run from their own threads).
pub fn hand_out_actions(hub: &HookHub, engine: &mut Embedded) {
    let actions = engine.take_actions();
    if !actions.is_empty() {
        hub.offer_actions(actions, gpumon_runtime::clock::wall_ms());
    }
}

/// Hands the engine's active alerts about the profiled node to `hub`.
pub fn relay(hub: &HookHub, engine: &Embedded) {
    let alerts = engine.state().node_alerts(engine.node(), MAX_NODE_ALERTS);
    hub.relay_alerts(&alerts);
}
