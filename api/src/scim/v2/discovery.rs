//! The discovery documents (RFC 7644 §4, RFC 7643 §5–§7): what this service provider supports
//! (PATCH and filtering, no bulk, sorting, ETags or password changes; bearer tokens), its two
//! resource types and their schemas, listing the attributes it keeps.

use serde_json::{Value, json};

use super::resources::{GROUP_SCHEMA, LIST_SCHEMA, USER_SCHEMA};
use super::users::MAX_COUNT;

const SPC_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig";
const RESOURCE_TYPE_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:ResourceType";
const SCHEMA_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Schema";

pub fn service_provider_config(base: &str) -> Value {
    json!({
        "schemas": [SPC_SCHEMA],
        "documentationUri": format!("{}/docs", base.trim_end_matches("/scim/v2")),
        "patch": {"supported": true},
        "bulk": {"supported": false, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": true, "maxResults": MAX_COUNT},
        "changePassword": {"supported": false},
        "sort": {"supported": false},
        "etag": {"supported": false},
        "authenticationSchemes": [{
            "type": "oauthbearertoken",
            "name": "OAuth Bearer Token",
            "description": "Authorization: Bearer scim_…, issued by an admin with POST /v1/orgs/{org}/scim/token.",
            "primary": true
        }],
        "meta": {
            "resourceType": "ServiceProviderConfig",
            "location": format!("{base}/ServiceProviderConfig")
        }
    })
}

fn resource_type(base: &str, name: &str, endpoint: &str, schema: &str) -> Value {
    json!({
        "schemas": [RESOURCE_TYPE_SCHEMA],
        "id": name,
        "name": name,
        "endpoint": endpoint,
        "description": format!("{name} provisioned by the organization's identity provider"),
        "schema": schema,
        "schemaExtensions": [],
        "meta": {"resourceType": "ResourceType", "location": format!("{base}/ResourceTypes/{name}")}
    })
}

pub fn resource_types(base: &str) -> Vec<Value> {
    vec![
        resource_type(base, "User", "/Users", USER_SCHEMA),
        resource_type(base, "Group", "/Groups", GROUP_SCHEMA),
    ]
}

fn attribute(name: &str, kind: &str, required: bool, mutability: &str, uniqueness: &str) -> Value {
    json!({
        "name": name,
        "type": kind,
        "multiValued": false,
        "description": name,
        "required": required,
        "caseExact": false,
        "mutability": mutability,
        "returned": "default",
        "uniqueness": uniqueness
    })
}

fn complex(name: &str, multi: bool, mutability: &str, sub: Vec<Value>) -> Value {
    json!({
        "name": name,
        "type": "complex",
        "multiValued": multi,
        "description": name,
        "required": false,
        "mutability": mutability,
        "returned": "default",
        "uniqueness": "none",
        "subAttributes": sub
    })
}

fn reference(name: &str, types: &[&str], mutability: &str) -> Value {
    json!({
        "name": name,
        "type": "reference",
        "referenceTypes": types,
        "multiValued": false,
        "description": name,
        "required": false,
        "caseExact": true,
        "mutability": mutability,
        "returned": "default",
        "uniqueness": "none"
    })
}

pub fn schemas(base: &str) -> Vec<Value> {
    let user = json!({
        "schemas": [SCHEMA_SCHEMA],
        "id": USER_SCHEMA,
        "name": "User",
        "description": "A member of the organization",
        "attributes": [
            attribute("userName", "string", true, "readWrite", "server"),
            attribute("externalId", "string", false, "readWrite", "none"),
            complex("name", false, "readWrite", vec![
                attribute("formatted", "string", false, "readOnly", "none"),
                attribute("givenName", "string", false, "readWrite", "none"),
                attribute("familyName", "string", false, "readWrite", "none"),
            ]),
            attribute("displayName", "string", false, "readWrite", "none"),
            complex("emails", true, "readWrite", vec![
                attribute("value", "string", false, "readWrite", "none"),
                attribute("type", "string", false, "readWrite", "none"),
                attribute("primary", "boolean", false, "readWrite", "none"),
            ]),
            attribute("active", "boolean", false, "readWrite", "none"),
            complex("groups", true, "readOnly", vec![
                attribute("value", "string", false, "readOnly", "none"),
                reference("$ref", &["Group"], "readOnly"),
                attribute("display", "string", false, "readOnly", "none"),
            ]),
        ],
        "meta": {"resourceType": "Schema", "location": format!("{base}/Schemas/{USER_SCHEMA}")}
    });
    let group = json!({
        "schemas": [SCHEMA_SCHEMA],
        "id": GROUP_SCHEMA,
        "name": "Group",
        "description": "A group; its displayName maps to a role through the SSO role mappings",
        "attributes": [
            attribute("displayName", "string", true, "readWrite", "server"),
            attribute("externalId", "string", false, "readWrite", "none"),
            complex("members", true, "readWrite", vec![
                attribute("value", "string", false, "immutable", "none"),
                reference("$ref", &["User"], "immutable"),
                attribute("display", "string", false, "readOnly", "none"),
            ]),
        ],
        "meta": {"resourceType": "Schema", "location": format!("{base}/Schemas/{GROUP_SCHEMA}")}
    });
    vec![user, group]
}

/// A list response of `resources`, all on one page.
pub fn list(resources: Vec<Value>) -> Value {
    json!({
        "schemas": [LIST_SCHEMA],
        "totalResults": resources.len(),
        "startIndex": 1,
        "itemsPerPage": resources.len(),
        "Resources": resources
    })
}
