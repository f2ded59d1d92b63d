//! Live settings: an admin's change, checked here against the state this
//! replica has, then committed through the log so every replica applies
//! it at the same point (and refuses it whole if the state it meets there
//! no longer takes it).

use gpumon_core::settings::SettingsChange;
use gpumon_proto::api::ConfigChange;

use super::{Service, ServiceError};
use crate::raft::{Command, CommandV1};

impl Service {
    /// Applies `req` on the leader; the error names the key and what it
    /// takes.
    pub async fn change_settings(&self, req: ConfigChange) -> Result<SettingsChange, ServiceError> {
        let change = settings_change(req);
        self.state_machine
            .read()
            .engine
            .settings()
            .check(&change)
            .map_err(|e| ServiceError::Invalid(e.to_string()))?;
        self.ensure_leader()?;
        let result = self
            .write(
                Command::V1(CommandV1::Settings(change.clone())),
                "the settings change",
            )
            .await?;
        if let Some(reason) = result.settings_refused {
            return Err(ServiceError::Conflict(reason));
        }
        tracing::info!(job = ?change.job, set = ?change.set, reset = ?change.reset,
            reset_all = change.reset_all, "live settings changed");
        Ok(change)
    }
}

/// The API's body as the log carries it: values as text.
fn settings_change(req: ConfigChange) -> SettingsChange {
    let set = req.set.iter().map(|(k, v)| (k.clone(), v.text())).collect();
    SettingsChange {
        job: req.job,
        set,
        reset: req.reset,
        reset_all: req.reset_all,
    }
}
