//! The deployment files agree with the node: every `node.toml` under `deploy/` (compose, the
//! Kubernetes base and overlays) loads and validates with its policy as `serve` would, and the
//! shutdown budget holds: the Kubernetes router pod's termination grace period exceeds its
//! preStop sleep plus the config's `http.shutdown_delay_ms` and `http.drain_timeout_ms`, the
//! compose routers' `stop_grace_period` exceeds the delay plus the drain, and the probes are
//! `/ready` (readiness) and `/health` (liveness); Prometheus scrapes the port the configs give
//! the admin listener (`/metrics` is not on the public one), and neither the Kubernetes
//! Service nor the compose file exposes that port to clients. The YAML's own schema is
//! checked by `scripts/check-deploy.sh` (docker-compose config, kubectl kustomize,
//! kubernetes-validate).

use router_node::config::Config;
use serde_norway::Value;
use std::path::{Path, PathBuf};
use switchyard_system_tests::support::{TempDir, workspace_root};

fn deploy(path: &str) -> PathBuf {
    workspace_root().join("deploy").join(path)
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut value: Value = serde_norway::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    value.apply_merge().expect("merge keys apply");
    value
}

/// A node config as `serve` loads it (no environment), its policy read too. `policy_dir` is
/// where its `policy.toml` sits when that is not next to it (a ConfigMap merged from two
/// directories).
fn load(node: &Path, policy_dir: Option<&Path>) -> Config {
    let dir = TempDir::new("deploy");
    let node_copy = dir.path().join("node.toml");
    std::fs::copy(node, &node_copy).expect("copy node.toml");
    let policy = policy_dir.unwrap_or_else(|| node.parent().expect("a directory"));
    std::fs::copy(policy.join("policy.toml"), dir.path().join("policy.toml"))
        .expect("copy policy.toml");
    let config = Config::load_with_env(Some(&node_copy), std::iter::empty::<(String, String)>())
        .unwrap_or_else(|e| panic!("{}: {e}", node.display()));
    config
        .policy_profile()
        .unwrap_or_else(|e| panic!("{}: {e}", node.display()));
    config
}

/// `"45s"`, `"1m"`, `"500ms"` as milliseconds.
fn compose_duration_ms(text: &str) -> u64 {
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else {
        panic!("unexpected duration {text:?}")
    };
    number.parse::<u64>().expect("an integer duration") * scale
}

#[test]
fn every_node_config_under_deploy_loads_with_its_policy() {
    let compose = load(&deploy("compose/node.toml"), None);
    assert!(compose.policy.path.is_some());
    let base = load(&deploy("k8s/base/node.toml"), None);
    assert_eq!(
        base.node.topology,
        router_node::config::TopologyKind::Aggregated
    );
    let disagg = load(
        &deploy("k8s/overlays/disaggregated/node.toml"),
        Some(&deploy("k8s/base")),
    );
    assert_eq!(
        disagg.node.topology,
        router_node::config::TopologyKind::Disaggregated
    );
    // The overlay changes the topology and nothing else of the base's [http] and [admin].
    assert_eq!(disagg.http, base.http);
    assert_eq!(disagg.admin, base.admin);
}

/// The port of a `host:port` listen address.
fn port(listen: &str) -> u16 {
    listen
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("{listen:?} has no port"))
}

#[test]
fn prometheus_scrapes_the_admin_port_which_clients_cannot_reach() {
    // Compose: Prometheus scrapes every replica on the admin port; no router publishes a port
    // (HAProxy is the clients' way in, to the public port only).
    let config = load(&deploy("compose/node.toml"), None);
    let admin = port(&config.admin.listen);
    assert_ne!(admin, port(&config.http.listen));
    let prometheus = yaml(&deploy("compose/prometheus.yml"));
    let job = prometheus["scrape_configs"]
        .as_sequence()
        .and_then(|jobs| {
            jobs.iter()
                .find(|j| j["job_name"].as_str() == Some("switchyard-router"))
        })
        .expect("the switchyard-router job");
    assert_eq!(job["metrics_path"].as_str(), Some("/metrics"));
    let targets = job["static_configs"][0]["targets"]
        .as_sequence()
        .expect("targets");
    assert_eq!(targets.len(), 3);
    for target in targets {
        let target = target.as_str().expect("a target");
        assert_eq!(port(target), admin, "{target} is not the admin port");
    }
    let compose = yaml(&deploy("compose/docker-compose.yml"));
    for (name, service) in compose["services"].as_mapping().expect("services") {
        if name.as_str().is_some_and(|n| n.starts_with("router-")) {
            assert!(service["ports"].is_null(), "{name:?} publishes ports");
        }
    }
    let haproxy = std::fs::read_to_string(deploy("compose/haproxy.cfg")).expect("haproxy.cfg");
    assert!(
        !haproxy.contains(&format!(":{admin}")),
        "HAProxy reaches the admin port"
    );

    // Kubernetes: the pod's `admin` port is the config's, Prometheus's annotation names it,
    // and the Service targets the public port only.
    let config = load(&deploy("k8s/base/node.toml"), None);
    let admin = port(&config.admin.listen);
    let deployment = yaml(&deploy("k8s/base/router.yaml"));
    let template = &deployment["spec"]["template"];
    let annotations = &template["metadata"]["annotations"];
    assert_eq!(
        annotations["prometheus.io/port"].as_str(),
        Some(admin.to_string().as_str())
    );
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
    let ports = template["spec"]["containers"][0]["ports"]
        .as_sequence()
        .expect("container ports");
    let named = |name: &str| {
        ports
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_u64())
    };
    assert_eq!(named("admin"), Some(u64::from(admin)));
    assert_eq!(named("http"), Some(u64::from(port(&config.http.listen))));
    let service = yaml(&deploy("k8s/base/router-service.yaml"));
    for service_port in service["spec"]["ports"].as_sequence().expect("ports") {
        assert_eq!(service_port["targetPort"].as_str(), Some("http"));
    }
}

#[test]
fn the_kubernetes_router_pod_outlives_its_drain_and_probes_ready_and_health() {
    let config = load(&deploy("k8s/base/node.toml"), None);
    let deployment = yaml(&deploy("k8s/base/router.yaml"));
    let pod = &deployment["spec"]["template"]["spec"];
    let grace_s = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    let router = &pod["containers"][0];
    let pre_stop = &router["lifecycle"]["preStop"]["exec"]["command"];
    assert_eq!(pre_stop[0].as_str(), Some("sleep"), "{pre_stop:?}");
    let sleep_s: u64 = pre_stop[1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("preStop sleep seconds");
    let needed_ms = sleep_s * 1_000 + config.http.shutdown_delay_ms + config.http.drain_timeout_ms;
    assert!(
        grace_s * 1_000 > needed_ms,
        "terminationGracePeriodSeconds {grace_s} s must exceed preStop {sleep_s} s + \
         shutdown_delay_ms {} + drain_timeout_ms {}",
        config.http.shutdown_delay_ms,
        config.http.drain_timeout_ms
    );
    assert!(config.http.shutdown_delay_ms > 0, "no shutdown delay");
    assert_eq!(
        router["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/ready")
    );
    assert_eq!(
        router["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/health")
    );
    let env = router["env"].as_sequence().expect("env");
    let config_var = env
        .iter()
        .find(|e| e["name"].as_str() == Some(router_node::config::ENV_CONFIG))
        .expect("SWITCHYARD_CONFIG is set");
    assert_eq!(
        config_var["value"].as_str(),
        Some("/etc/switchyard/node.toml")
    );
}

#[test]
fn the_compose_routers_outlive_their_drain() {
    let config = load(&deploy("compose/node.toml"), None);
    let compose = yaml(&deploy("compose/docker-compose.yml"));
    let services = compose["services"].as_mapping().expect("services");
    let routers: Vec<_> = services
        .iter()
        .filter(|(name, _)| name.as_str().is_some_and(|n| n.starts_with("router-")))
        .collect();
    assert_eq!(routers.len(), 3, "three router replicas");
    for (name, service) in routers {
        let grace = service["stop_grace_period"]
            .as_str()
            .map(compose_duration_ms)
            .expect("stop_grace_period");
        assert!(
            grace > config.http.shutdown_delay_ms + config.http.drain_timeout_ms,
            "{name:?}: stop_grace_period {grace} ms is within the delay and the drain"
        );
        assert_eq!(
            service["environment"]["SWITCHYARD_CONFIG"].as_str(),
            Some("/etc/switchyard/node.toml"),
            "{name:?}"
        );
    }
}
