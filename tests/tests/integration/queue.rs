//! The job queue across processes: the api's own push code, separate `worker` processes, real
//! SMTP delivery. Runs on Postgres when `TEST_DATABASE_URL` is set, else on SQLite.

use std::{collections::HashMap, time::Duration};

use platform::{
    db::Database,
    jobs::{Queue, SendEmail},
};
use tests::{
    SmtpSink, TestDatabase,
    processes::{spawn_worker, stop_gracefully},
};

/// The worker program, as a separate process.
const WORKER: &str = env!("CARGO_BIN_EXE_fleet-worker");

fn email(i: usize) -> SendEmail {
    SendEmail::new(
        format!("member-{i}@fleet.test"),
        format!("Message {i}"),
        format!("Plain text {i}"),
        format!("<p>HTML {i}</p>"),
    )
}

async fn migrated(database: &TestDatabase) -> Database {
    let db = Database::connect_url(database.url(), 8)
        .await
        .expect("connect");
    db.migrate().await.expect("migrate");
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_email_queued_by_the_api_code_is_delivered_by_a_separate_worker_process() {
    let database = TestDatabase::create().await;
    let db = migrated(&database).await;
    let sink = SmtpSink::start().await;
    let mut worker = spawn_worker(WORKER, database.url(), &sink.url(), 4);

    let message = email(1);
    Queue::new(&db).push(message.clone()).await.expect("queued");

    let delivered = sink
        .wait_for_message_to("member-1@fleet.test", Duration::from_secs(60))
        .await;
    assert_eq!(delivered.header("Subject").as_deref(), Some("Message 1"));
    assert!(
        delivered
            .header("Message-ID")
            .is_some_and(|id| id.contains(&message.id)),
        "the job's id is the Message-ID"
    );
    assert!(delivered.text().contains("Plain text 1"));
    assert!(delivered.text().contains("<p>HTML 1</p>"));

    worker.start_kill().expect("stop the worker");
    let _ = worker.wait().await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_run_each_of_a_thousand_jobs_exactly_once() {
    let database = TestDatabase::create().await;
    let db = migrated(&database).await;
    let sink = SmtpSink::start().await;
    let queue = Queue::new(&db);
    let messages: Vec<SendEmail> = (0..1000).map(email).collect();
    for message in &messages {
        queue.push(message.clone()).await.expect("queued");
    }

    let mut first = spawn_worker(WORKER, database.url(), &sink.url(), 16);
    let mut second = spawn_worker(WORKER, database.url(), &sink.url(), 16);
    sink.wait_for(1000, Duration::from_secs(240)).await;
    // Both workers finish what they hold and exit: a duplicate, if any, has been sent by now.
    stop_gracefully(&mut first).await;
    stop_gracefully(&mut second).await;

    let received = sink.messages().await;
    let mut per_id: HashMap<String, usize> = HashMap::new();
    for message in &received {
        let id = message.header("Message-ID").expect("Message-ID");
        *per_id.entry(id).or_default() += 1;
    }
    assert_eq!(received.len(), 1000, "exactly 1000 deliveries");
    assert_eq!(per_id.len(), 1000, "1000 distinct messages");
    assert!(per_id.values().all(|&n| n == 1), "no message twice");
    for message in &messages {
        assert!(
            per_id.keys().any(|id| id.contains(&message.id)),
            "message {} delivered",
            message.id
        );
    }

    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_a_killed_worker_runs_again_on_another_worker() {
    let database = TestDatabase::create().await;
    let db = migrated(&database).await;
    let sink = SmtpSink::start().await;
    sink.stall_first_message_to("member-7@fleet.test");

    let mut doomed = spawn_worker(WORKER, database.url(), &sink.url(), 4);
    let message = email(7);
    Queue::new(&db).push(message.clone()).await.expect("queued");
    // The doomed worker is now mid-delivery: the sink holds its DATA unanswered.
    sink.wait_for_stall(Duration::from_secs(60)).await;

    let mut survivor = spawn_worker(WORKER, database.url(), &sink.url(), 4);
    doomed.start_kill().expect("SIGKILL the worker");
    let _ = doomed.wait().await;
    let killed_at = std::time::Instant::now();

    let delivered = sink
        .wait_for_message_to("member-7@fleet.test", Duration::from_secs(60))
        .await;
    let waited = killed_at.elapsed();
    // The survivor finishes what it holds and exits before the deliveries are counted.
    stop_gracefully(&mut survivor).await;
    assert!(
        delivered
            .header("Message-ID")
            .is_some_and(|id| id.contains(&message.id))
    );
    assert_eq!(
        sink.messages().await.len(),
        1,
        "delivered once, by the survivor"
    );
    eprintln!("the killed worker's job ran again after {waited:?}");

    db.close().await;
}
