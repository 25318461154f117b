//! Where the OpenAPI document is built: [`Documented`] wraps all operations and adds what the
//! edge does to every one of them, so no handler has to repeat it.
//!
//! - Every operation that takes a request body may answer 413 `payload-too-large`: the edge
//!   reads bodies through a size limit before any handler runs (`crate::middleware`).

use std::collections::HashMap;

use poem::{endpoint::BoxEndpoint, http::Method};
use poem_openapi::{
    OpenApi,
    registry::{MetaApi, Registry},
    types::Type,
};

use crate::error::{self, PayloadTooLarge};

/// All operations, with the answers the edge adds to them documented.
pub struct Documented<T>(pub T);

impl<T: OpenApi> OpenApi for Documented<T> {
    fn meta() -> Vec<MetaApi> {
        let mut apis = T::meta();
        for operation in apis
            .iter_mut()
            .flat_map(|api| api.paths.iter_mut())
            .flat_map(|path| path.operations.iter_mut())
        {
            if operation.request.is_some() {
                error::document::<PayloadTooLarge>(&mut operation.responses);
            }
        }
        apis
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
        error::Problem::register(registry);
    }

    fn add_routes(self, route_table: &mut HashMap<String, HashMap<Method, BoxEndpoint<'static>>>) {
        self.0.add_routes(route_table);
    }
}
