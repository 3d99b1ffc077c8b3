//! `vergence-agent`: reads its settings, builds the Kubernetes client (the
//! in-cluster service account, or KUBECONFIG outside a cluster) and runs
//! until SIGTERM or Ctrl-C.

use anyhow::Result;
use clap::Parser;
use vergence_agent::{Agent, AgentError, Settings};

/// Runs Vergence's Kubernetes jobs in this cluster; connects out only.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The Vergence API's URL (what `vergence serve` prints, or the api
    /// function's), without /v1.
    #[arg(long, env = "VERGENCE_API_URL")]
    api_url: String,
    /// This agent's name, as runtimes name it (runner: {kubernetes: {agent: NAME}}).
    #[arg(long, env = "VERGENCE_AGENT_NAME")]
    agent: String,
    /// The agent's token, from `vergence token create --agent NAME`.
    #[arg(long, env = "VERGENCE_AGENT_TOKEN", hide_env_values = true)]
    token: String,
    /// Namespace of Jobs whose runtime names none: the agent's own.
    #[arg(long, env = "VERGENCE_AGENT_NAMESPACE", default_value = "default")]
    namespace: String,
    /// Seconds finished Jobs are kept (ttlSecondsAfterFinished).
    #[arg(long, env = "VERGENCE_JOB_TTL_SECONDS", default_value_t = 3600)]
    job_ttl_seconds: u32,
    /// Seconds one poll asks the API to hold it while there is no work (at
    /// most 20). 0: answered at once; the agent waits --poll-interval-seconds
    /// between polls itself, which keeps an idle agent cheap on the
    /// serverless API (docs/cost.md).
    #[arg(long, env = "VERGENCE_AGENT_POLL_WAIT_SECONDS", default_value_t = 0)]
    poll_wait_seconds: u64,
    /// Seconds between the starts of polls that find nothing to do: the
    /// most a job waits to reach an idle agent (from 1 to 60).
    #[arg(long, env = "VERGENCE_AGENT_POLL_INTERVAL_SECONDS", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(1..=60))]
    poll_interval_seconds: u64,
    /// The cluster's name, shown in `vergence status`.
    #[arg(long, env = "VERGENCE_CLUSTER_NAME")]
    cluster: Option<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let settings = Settings {
        api_url: args.api_url,
        agent: args.agent,
        token: args.token,
        namespace: args.namespace,
        job_ttl_seconds: args.job_ttl_seconds,
        poll_wait_seconds: args.poll_wait_seconds,
        poll_interval: std::time::Duration::from_secs(args.poll_interval_seconds),
        cluster: args.cluster,
    };
    let client = kube::Client::try_default()
        .await
        .map_err(AgentError::KubeConfig)?;
    Agent::new(settings, client)?.run(stopped()).await;
    Ok(())
}

/// Completes on SIGTERM (how Kubernetes stops a pod) or Ctrl-C.
async fn stopped() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
