//! The OpenAPI 3.1 document, generated from the handler annotations and the types.

use axum::Json;
use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

use crate::routes;

#[derive(OpenApi)]
#[openapi(
    info(title = "agent-memory retrieve API", description = "Memories worth putting into an agent's next prompt."),
    paths(
        routes::system::healthz,
        routes::catalogue::tools,
        routes::retrieve::retrieve,
        routes::retrieve::memory_query_tool,
        routes::tools::search_lexical,
        routes::tools::search_semantic,
        routes::tools::read_symbol,
        routes::tools::read_file_range,
        routes::catalogue::call_by_name,
        routes::search::search,
        routes::memories::get_memory,
        routes::memories::chain,
        routes::memories::profiles,
        routes::memories::review,
        routes::system::queues,
    ),
    components(schemas(
        routes::retrieve::MemoryQueryInput,
        routes::tools::CodeSearchInput,
        routes::tools::ReadSymbolInput,
        routes::tools::ReadFileRangeInput,
        routes::tools::MemoryIdInput,
        routes::search::SearchBody
    )),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
    }
}

/// `GET /openapi.json`.
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
