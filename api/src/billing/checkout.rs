//! `POST /billing/checkout {plan}`: a checkout session at the payment processor for one of the
//! paid plans (decisions §17). The processor's `checkout.session.completed` event later links
//! its customer to the organization (the session names it by slug), and its subscription
//! events set the plan.

use domain::billing::Plan;
use platform::payments_api::{CheckoutSession, PaymentsApi, PaymentsError};
use poem_openapi::{Enum, Object, OpenApi, payload::Json};

use crate::{
    AppState,
    billing::account::checkout_available,
    http::access::org,
    http::error::{
        ApiError, BadRequest, Errors, Forbidden, NotFound, PaymentsUnavailable, TooManyRequests,
        Unauthorized,
    },
    http::rights::Billing as OwnerOnly,
    http::tags::Tag,
};

/// A plan that can be bought.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
#[oai(rename_all = "lowercase")]
pub enum PaidPlan {
    Team,
    Business,
    Enterprise,
}

impl From<PaidPlan> for Plan {
    fn from(plan: PaidPlan) -> Plan {
        match plan {
            PaidPlan::Team => Plan::Team,
            PaidPlan::Business => Plan::Business,
            PaidPlan::Enterprise => Plan::Enterprise,
        }
    }
}

#[derive(Object)]
#[oai(deny_unknown_fields)]
pub struct CheckoutRequest {
    /// team, business or enterprise.
    pub plan: PaidPlan,
}

#[derive(Object)]
pub struct Checkout {
    /// The processor's checkout page: send the owner there.
    pub url: String,
}

/// `{SERVICE_BASE_URL}/orgs/{slug}/billing?checkout=<outcome>`
fn return_url(state: &AppState, slug: &str, outcome: &str) -> String {
    let base = &state.config.base_url;
    let mut url = base.clone();
    url.set_path(&format!(
        "{}/orgs/{slug}/billing",
        base.path().trim_end_matches('/')
    ));
    url.query_pairs_mut()
        .clear()
        .append_pair("checkout", outcome);
    url.to_string()
}

fn unavailable(err: PaymentsError) -> ApiError {
    tracing::warn!(error = %err, "checkout session not created");
    ApiError::Unavailable(
        "The payment processor did not create a checkout session; try again later.".into(),
    )
}

pub struct CheckoutApi;

#[OpenApi(tag = "Tag::Billing")]
impl CheckoutApi {
    /// A checkout session at the payment processor for a paid plan; answers its `url`. Owner
    /// only, in person. The plan changes when the processor reports the subscription (through
    /// the payment webhook), not here. 503 `not-configured` when the deployment takes no
    /// payments; 503 `unavailable` when the processor does not answer.
    #[oai(
        path = "/v1/orgs/:org/billing/checkout",
        method = "post",
        operation_id = "createCheckout"
    )]
    async fn checkout(
        &self,
        state: poem::web::Data<&AppState>,
        org: org::Path<OwnerOnly>,
        body: Json<CheckoutRequest>,
    ) -> Result<
        Json<Checkout>,
        Errors<(
            BadRequest,
            Unauthorized,
            Forbidden,
            NotFound,
            TooManyRequests,
            PaymentsUnavailable,
        )>,
    > {
        let api = PaymentsApi::from_config(&state.config, &state.outbound)
            .filter(|_| checkout_available(&state))
            .ok_or_else(|| {
                ApiError::NotConfigured(
                    "This deployment takes no payments (PAYMENTS_API_URL or PAYMENTS_WEBHOOK_SECRET is not set).".into(),
                )
            })?;
        let plan = Plan::from(body.0.plan);
        let customer = domain::billing::subscription_of(&state.db.orm, org.org.id.into())
            .await?
            .and_then(|row| row.customer_id);
        let price = api.price_for(plan.as_str()).await.map_err(unavailable)?;
        let slug = org.org.slug.as_str();
        let url = api
            .checkout_session(&CheckoutSession {
                price: &price,
                slug,
                customer: customer.as_deref(),
                success_url: &return_url(&state, slug, "done"),
                cancel_url: &return_url(&state, slug, "cancelled"),
            })
            .await
            .map_err(unavailable)?;
        Ok(Json(Checkout { url }))
    }
}
