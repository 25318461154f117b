//! `policy.evaluate`: bring one policy's proposals in line with what its hosts need now (the
//! rules are in `domain::policy`). A run that finds the policy busy comes back shortly. After
//! a run, changes whose changelog is not cached yet get a `changelog.fetch`.

use apalis::prelude::{BoxDynError, Data};
use domain::policy::Evaluated;
use domain::policy::jobs::EvaluatePolicy;

use crate::Deps;

/// How long a run that found its policy busy waits before trying again.
const RETRY_WHEN_BUSY: std::time::Duration = std::time::Duration::from_secs(3);

pub async fn run(job: EvaluatePolicy, deps: Data<Deps>) -> Result<(), BoxDynError> {
    let now = deps.clock.now();
    if domain::policy::evaluate_policy(&deps.db, &deps.reports, job.policy_id, now).await?
        == Evaluated::Busy
    {
        // Another run holds the policy: come back once it is likely done. The mark stays, so
        // host changes meanwhile queue nothing more; this one job carries them all.
        platform::jobs::Queue::new(&deps.db)
            .push_after(job, RETRY_WHEN_BUSY)
            .await?;
    } else {
        // A proposal it opened (or approved at once) is a notification event.
        crate::jobs::notify_dispatch::kick(&deps).await;
        // Changes that appeared get their changelogs fetched. Never the evaluation's failure:
        // the proposal stands, its changelog shows pending, the next evaluation asks again.
        if let Err(err) = domain::intel::cache::queue_for_policy(&deps.db, job.policy_id, now).await
        {
            tracing::warn!(error = %err, "could not queue changelog fetches");
        }
    }
    Ok(())
}
