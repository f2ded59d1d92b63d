//! The generated document against the route table and the router's source.

use std::collections::BTreeSet;

use serde_json::Value;

use super::super::routes::ROUTES;
use super::*;

fn doc() -> Value {
    serde_json::from_str(&OPENAPI_JSON).unwrap()
}

#[test]
fn the_document_is_openapi_3() {
    let doc = doc();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert!(doc["paths"]["/api/v1/jobs/{job}"]["get"].is_object());
    assert!(doc["components"]["securitySchemes"][ADMIN_TOKEN].is_object());
    let schemas = &doc["components"]["schemas"];
    for name in ["StepVerdict", "StepPart", "StepBound"] {
        assert!(schemas[name].is_object(), "{name} is described");
    }
}

#[test]
fn every_served_route_is_documented_and_every_documented_route_is_served() {
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .filter(|r| r.group.documented())
        .map(|r| (r.verb.name().to_owned(), r.path.to_owned()))
        .collect();
    let mut documented = BTreeSet::new();
    for (path, item) in doc()["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap() {
            documented.insert((method.clone(), path.clone()));
        }
    }
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served but not documented: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "documented but not served: {unserved:?}"
    );
}

#[test]
fn the_router_serves_the_route_table_and_nothing_else() {
    // The router is built from `ROUTES` alone; a route added beside the
    // table would escape the comparison above.
    let source = include_str!("../mod.rs");
    let start = source.find("pub fn router(").unwrap();
    let body = &source[start..start + source[start..].find("\n}\n").unwrap()];
    assert!(body.contains("for r in routes::ROUTES"));
    assert!(body.contains("let guarded = layered.layer(middleware::from_fn_with_state("));
    assert!(
        body.contains("auth::require"),
        "every route behind auth, outermost"
    );
    assert_eq!(
        body.matches(".route(").count(),
        body.matches(".route(r.path, guarded)").count(),
        "a route outside the table"
    );
    assert!(!body.contains(".nest("), "a router outside the table");
}

#[test]
fn the_document_asks_for_the_admin_token_exactly_where_the_auth_layer_does_and_reads_take_consistency(
) {
    let doc = doc();
    for r in ROUTES.iter().filter(|r| r.group.documented()) {
        let security = &doc["paths"][r.path][r.verb.name()]["security"];
        let documented = security[0][ADMIN_TOKEN].is_array();
        assert_eq!(
            documented,
            r.access == super::super::auth::Access::Admin,
            "{} {}: the route table says {:?}, the document {security}",
            r.verb.name(),
            r.path,
            r.access
        );
    }
    for r in ROUTES.iter().filter(|r| r.verb.name() == "get") {
        if r.group != super::super::routes::Group::Consistent {
            continue;
        }
        let params = doc["paths"][r.path]["get"]["parameters"].as_array();
        let names: Vec<&str> = params
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"consistency"), "GET {}: {names:?}", r.path);
    }
}
