//! What the two adapters served over HTTP, `http` (the API) and `ui` (the
//! dashboard), share: the axum state every handler of either receives. It sits
//! beside them so neither imports the other (docs/architecture.md).

use std::sync::Arc;

use crate::config::Settings;
use crate::service::Service;

/// Shared by every handler. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The use cases.
    pub service: Service,
    pub settings: Arc<Settings>,
}

impl AppState {
    pub fn new(service: Service) -> Self {
        let settings = service.settings().clone();
        AppState { service, settings }
    }

    /// From now on `/readyz` answers 503 so load balancers drain this replica (and
    /// long-polls and event streams end).
    pub fn begin_shutdown(&self) {
        self.service.begin_shutdown();
    }

    pub fn is_shutting_down(&self) -> bool {
        self.service.is_shutting_down()
    }
}
