//! Secrets of the deployment itself, such as the agent CA (its key sealed with `SECRETS_KEY`
//! when one is configured).

use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "deployment_secrets")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    pub value: String,
    pub created_at: DateTimeUtc,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeploymentSecret")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

crate::no_relations!();
