//! The controllers benchmark's measurement, on a small Deployment with the test as node agent.

mod common;

use anyhow::Result;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_benchmark_reports_creation_readiness_and_peak_memory() -> Result<()> {
    let c = common::start().await?;
    let client = c.client.clone();
    let agent = tokio::spawn(async move {
        loop {
            let _ =
                common::make_all_ready(&client, tandem_controllers::bench::NAMESPACE, "app=scale")
                    .await;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    let report = tandem_controllers::bench::bench_deployment_scale(c.client.clone(), 5).await?;
    agent.abort();
    assert!(
        report.all_created.is_some() && report.all_ready.is_some(),
        "{report}"
    );
    assert!(report.all_created <= report.all_ready);
    assert!(report.peak_rss_kib.is_some_and(|k| k > 0));
    assert!(report.to_string().contains("0 → 5 replicas"));
    Ok(())
}
