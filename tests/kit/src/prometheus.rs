//! A real Prometheus (Debian's package) scraping, every second, an
//! exporter whose value the test sets: what the metric protections' tests
//! read, from async tests and from tests of the `vergence` binary alike.
//! Both stop when dropped.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::free_port;

/// The metric `shop_error_ratio{service="web"}`, at the value last set,
/// served at `/metrics` on 127.0.0.1 from a thread of its own.
#[derive(Debug)]
pub struct Exporter {
    state: Arc<Mutex<Served>>,
    pub port: u16,
}

#[derive(Debug, Default)]
struct Served {
    ratio: f64,
    /// Scrapes that returned the current value.
    scrapes_since_set: u32,
}

impl Exporter {
    /// Serves `ratio` until it is set to something else.
    pub fn start(ratio: f64) -> Self {
        let state = Arc::new(Mutex::new(Served {
            ratio,
            scrapes_since_set: 0,
        }));
        let served = state.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let app = axum::Router::new().route(
                    "/metrics",
                    axum::routing::get(move || {
                        let mut state = served.lock().unwrap();
                        state.scrapes_since_set += 1;
                        let value = state.ratio;
                        async move {
                            format!(
                                "# TYPE shop_error_ratio gauge\nshop_error_ratio{{service=\"web\"}} {value}\n"
                            )
                        }
                    }),
                );
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Self { state, port }
    }

    /// Serves `ratio` from now on.
    pub fn set(&self, ratio: f64) {
        let mut state = self.state.lock().unwrap();
        state.ratio = ratio;
        state.scrapes_since_set = 0;
    }

    /// Waits until Prometheus has scraped the current value twice: it is
    /// then in its storage, whatever the order of scrape and query.
    pub fn wait_scraped(&self) {
        crate::wait_for(
            "two scrapes of the exporter",
            Duration::from_secs(30),
            || self.state.lock().unwrap().scrapes_since_set >= 2,
        );
    }
}

/// Debian's `prometheus`, scraping one exporter every second.
#[derive(Debug)]
pub struct Prometheus {
    /// The server's base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    _daemon: Daemon,
}

impl Prometheus {
    /// Starts it, scraping `exporter`. `None` (the test skips) without the
    /// binary, unless `VERGENCE_REQUIRE_SERVICES=1` makes that a failure
    /// (`scripts/test.sh` installs it).
    pub fn start(exporter: &Exporter) -> Option<Self> {
        Self::start_alerting(exporter, None)
    }

    /// Starts it, scraping `exporter`, and with `alerting` its alerting
    /// rules (a rule file's YAML) evaluated every second and sent to the
    /// Alertmanager at the URL.
    pub fn start_alerting(exporter: &Exporter, alerting: Option<(&str, &str)>) -> Option<Self> {
        if !installed("prometheus") {
            return None;
        }
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("prometheus.yml");
        let mut yaml = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n  - job_name: shop\n    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
            exporter.port
        );
        if let Some((rules, alertmanager)) = alerting {
            let file = data.path().join("rules.yml");
            std::fs::write(&file, rules).unwrap();
            let target = alertmanager
                .trim_start_matches("http://")
                .trim_end_matches('/');
            yaml.push_str(&format!(
                "rule_files: ['{}']\nalerting:\n  alertmanagers:\n    - static_configs: [{{targets: ['{target}']}}]\n",
                file.display()
            ));
        }
        std::fs::write(&config, yaml).unwrap();
        let daemon = Daemon::start(
            "prometheus",
            &[
                format!("--config.file={}", config.display()),
                format!("--storage.tsdb.path={}", data.path().join("tsdb").display()),
            ],
            data,
        );
        Some(Self {
            url: daemon.url(),
            _daemon: daemon,
        })
    }
}

/// Debian's `prometheus-alertmanager`, alone (no cluster), with the
/// configuration given.
#[derive(Debug)]
pub struct Alertmanager {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    _daemon: Daemon,
}

impl Alertmanager {
    /// Starts it with `config` (alertmanager.yml). `None` as for
    /// [`Prometheus::start`].
    pub fn start(config: &str) -> Option<Self> {
        if !installed("prometheus-alertmanager") {
            return None;
        }
        let data = tempfile::tempdir().unwrap();
        let file = data.path().join("alertmanager.yml");
        std::fs::write(&file, config).unwrap();
        let store = format!("--storage.path={}", data.path().display());
        let daemon = Daemon::start(
            "prometheus-alertmanager",
            &[
                format!("--config.file={}", file.display()),
                store,
                "--cluster.listen-address=".to_owned(),
            ],
            data,
        );
        Some(Self {
            url: daemon.url(),
            _daemon: daemon,
        })
    }
}

/// One of the two servers, on a free port of 127.0.0.1, with its files;
/// stopped when dropped.
#[derive(Debug)]
struct Daemon {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Daemon {
    /// Starts `program` with `args` and a listen address of its own, and
    /// waits until it listens.
    fn start(program: &str, args: &[String], data: tempfile::TempDir) -> Self {
        let port = free_port();
        let child = Command::new(program)
            .args(args)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        crate::wait_for(program, Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Self {
            child,
            port,
            _data: data,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `program` runs; a missing one fails the test when
/// `VERGENCE_REQUIRE_SERVICES=1`, else the test skips.
fn installed(program: &str) -> bool {
    if Command::new(program).arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var("VERGENCE_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{program} is not installed and VERGENCE_REQUIRE_SERVICES=1: \
         scripts/test.sh installs it (apt-get install {program})"
    );
    println!("skipped: no {program} on PATH");
    false
}
