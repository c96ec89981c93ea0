use utoipa_axum::router::OpenApiRouter;

use super::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
}
