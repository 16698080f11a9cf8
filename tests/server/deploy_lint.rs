//! Lints everything under `deploy/` that can be checked without a container engine, a cluster
//! or an init system: the Kubernetes manifests (parsed as YAML, key fields checked, the config
//! they carry loaded by `steerdns check`), the systemd unit (directives, `systemd-analyze
//! verify` and `security`), sysusers/tmpfiles (applied to a scratch root), the BIRD config
//! (`bird -p`), the shell scripts (`bash -n`, and each run for real: the BIRD health check
//! against a real server on loopback, `fleet/demo.sh` with etcd and three nodes on loopback,
//! bounded, then stopped with SIGINT).
//!
//! Tools that are not part of the Rust toolchain (systemd-analyze, bird, dig) are required:
//! a missing one fails the test with the package to install, never a silent pass. To skip one
//! deliberately, set `STEERDNS_LINT_SKIP` to a comma-separated list (`systemd,bird,kubectl`); the test
//! then says on stderr what it did not check.

use crate::common;
use crate::hostile_common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, repo_path, Server};
use yaml_rust2::{Yaml, YamlLoader};

// ---------------------------------------------------------------------------------------------
// helpers

fn deploy(relative: &str) -> PathBuf {
    repo_path("deploy").join(relative)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A scratch directory under the target dir, emptied first (no tempfile dependency).
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("deploy_lint-{name}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Whether the tool named `what` was deliberately excluded with `STEERDNS_LINT_SKIP`.
fn skipped(what: &str) -> bool {
    let skip = std::env::var("STEERDNS_LINT_SKIP").unwrap_or_default();
    let hit = skip.split(',').any(|s| s.trim() == what);
    if hit {
        eprintln!("deploy_lint: NOT CHECKED ({what}): excluded by STEERDNS_LINT_SKIP");
    }
    hit
}

/// Runs a required external tool; a missing tool fails with the package that provides it.
fn run_tool(program: &str, package: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{program} is needed to lint deploy/ ({e}); install it (apt-get install {package}) \
                 or set STEERDNS_LINT_SKIP to skip this check explicitly"
            )
        })
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn steerdns_check(config: &Path) {
    let output = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["check", "--config"])
        .arg(config)
        .output()
        .expect("run steerdns check");
    assert!(
        output.status.success(),
        "steerdns check {} failed:\n{}",
        config.display(),
        text(&output)
    );
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

struct Manifests {
    /// (file name, document) for every YAML document except the kustomization.
    docs: Vec<(String, Yaml)>,
    kustomization: Yaml,
}

fn load_manifests() -> Manifests {
    let dir = deploy("kubernetes");
    let mut docs = Vec::new();
    let mut kustomization = None;
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let parsed = YamlLoader::load_from_str(&read(&path))
            .unwrap_or_else(|e| panic!("{}: not valid YAML: {e}", path.display()));
        assert!(!parsed.is_empty(), "{name}: no YAML document");
        for doc in parsed {
            if name == "kustomization.yaml" {
                kustomization = Some(doc);
            } else {
                assert!(
                    doc["apiVersion"].as_str().is_some() && doc["kind"].as_str().is_some(),
                    "{name}: a document without apiVersion/kind"
                );
                docs.push((name.clone(), doc));
            }
        }
    }
    Manifests {
        docs,
        kustomization: kustomization.expect("deploy/kubernetes/kustomization.yaml"),
    }
}

impl Manifests {
    fn of_kind(&self, kind: &str) -> Vec<&Yaml> {
        self.docs
            .iter()
            .filter(|(_, d)| d["kind"].as_str() == Some(kind))
            .map(|(_, d)| d)
            .collect()
    }

    fn one(&self, kind: &str) -> &Yaml {
        let found = self.of_kind(kind);
        assert_eq!(found.len(), 1, "expected exactly one {kind}");
        found[0]
    }

    fn config_map(&self, name: &str) -> &Yaml {
        self.of_kind("ConfigMap")
            .into_iter()
            .find(|d| d["metadata"]["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no ConfigMap named {name}"))
    }

    fn daemonset_container(&self) -> &Yaml {
        let containers = self.one("DaemonSet")["spec"]["template"]["spec"]["containers"]
            .as_vec()
            .expect("DaemonSet containers");
        containers
            .iter()
            .find(|c| c["name"].as_str() == Some("steerdns"))
            .expect("a container named steerdns")
    }

    /// The steerdns.toml the DaemonSet runs with, parsed.
    fn config(&self) -> toml::Table {
        let text = self.config_map("steerdns-config")["data"]["steerdns.toml"]
            .as_str()
            .expect("steerdns-config has steerdns.toml");
        text.parse()
            .expect("steerdns.toml in the ConfigMap is TOML")
    }
}

fn str_list(yaml: &Yaml) -> Vec<String> {
    yaml.as_vec()
        .map(|v| {
            v.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn kubernetes_manifests_have_every_kind_and_kustomize_lists_them_all() {
    let m = load_manifests();
    let kinds: BTreeSet<&str> = m
        .docs
        .iter()
        .filter_map(|(_, d)| d["kind"].as_str())
        .collect();
    for kind in ["Namespace", "ConfigMap", "DaemonSet", "PodDisruptionBudget"] {
        assert!(kinds.contains(kind), "no {kind} in deploy/kubernetes");
    }
    for name in ["steerdns-config", "steerdns-zones", "steerdns-control"] {
        m.config_map(name);
    }
    let listed: BTreeSet<String> = str_list(&m.kustomization["resources"])
        .into_iter()
        .collect();
    let files: BTreeSet<String> = m.docs.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(
        listed, files,
        "kustomization.yaml resources vs the manifest files"
    );
    for (file, doc) in &m.docs {
        if doc["kind"].as_str() != Some("Namespace") {
            assert_eq!(
                doc["metadata"]["namespace"].as_str(),
                m.kustomization["namespace"].as_str(),
                "{file}: namespace"
            );
        }
    }
}

#[test]
fn daemonset_serves_port_53_on_the_host_network_as_non_root() {
    let m = load_manifests();
    let ds = m.one("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"].as_bool(), Some(true), "hostNetwork");
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    let selector = &ds["spec"]["selector"]["matchLabels"];
    assert!(
        selector.as_hash().is_some_and(|h| !h.is_empty()),
        "selector"
    );
    for (k, v) in selector.as_hash().expect("matchLabels") {
        assert_eq!(
            &labels[k.as_str().expect("label key")],
            v,
            "pod labels match the selector"
        );
    }

    let c = m.daemonset_container();
    let ports: BTreeSet<(i64, String)> = c["ports"]
        .as_vec()
        .expect("ports")
        .iter()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP").to_string();
            (
                p["containerPort"].as_i64().expect("containerPort"),
                protocol,
            )
        })
        .collect();
    assert!(
        ports.contains(&(53, "UDP".into())),
        "port 53/UDP: {ports:?}"
    );
    assert!(
        ports.contains(&(53, "TCP".into())),
        "port 53/TCP: {ports:?}"
    );

    // Non-root, only NET_BIND_SERVICE, and the same uid as the image's user.
    let pod_sc = &pod["securityContext"];
    assert_eq!(pod_sc["runAsNonRoot"].as_bool(), Some(true), "runAsNonRoot");
    let uid = pod_sc["runAsUser"].as_i64().expect("runAsUser");
    assert!(uid > 0, "runAsUser must not be root");
    let containerfile = read(&deploy("container/Containerfile"));
    assert!(
        containerfile.contains(&format!("--uid {uid} ")),
        "the image's user must have uid {uid} (runAsUser)"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(str_list(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(str_list(&sc["capabilities"]["add"]), ["NET_BIND_SERVICE"]);

    assert!(
        c["resources"]["requests"]["cpu"].as_str().is_some(),
        "cpu request"
    );
    assert!(
        c["resources"]["requests"]["memory"].as_str().is_some(),
        "memory request"
    );
    assert!(
        c["resources"]["limits"]["memory"].as_str().is_some(),
        "memory limit"
    );

    let pdb = m.one("PodDisruptionBudget");
    assert_eq!(
        &pdb["spec"]["selector"]["matchLabels"], selector,
        "PDB selects the pods"
    );
    assert!(pdb["spec"]["maxUnavailable"]
        .as_i64()
        .is_some_and(|n| n >= 1));
}

#[test]
fn daemonset_probes_ask_the_admin_endpoint_the_config_opens() {
    let m = load_manifests();
    let config = m.config();
    let admin: SocketAddr = config["admin"]["listen"]
        .as_str()
        .expect("[admin] listen")
        .parse()
        .expect("[admin] listen is an address");
    let c = m.daemonset_container();
    for probe in ["readinessProbe", "livenessProbe"] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some("/v1/status"), "{probe} path");
        assert_eq!(
            get["port"].as_i64(),
            Some(i64::from(admin.port())),
            "{probe} port"
        );
        assert_eq!(
            get["host"].as_str(),
            Some(admin.ip().to_string().as_str()),
            "{probe} host: the admin endpoint listens on loopback"
        );
    }
}

/// Every path in the DaemonSet's config points into a volume the pod mounts, from a ConfigMap
/// (or Secret) the manifests define; the control history is the one writable mount.
#[test]
fn daemonset_config_paths_are_mounted() {
    let m = load_manifests();
    let pod = &m.one("DaemonSet")["spec"]["template"]["spec"];
    let volumes: BTreeMap<&str, &Yaml> = pod["volumes"]
        .as_vec()
        .expect("volumes")
        .iter()
        .map(|v| (v["name"].as_str().expect("volume name"), v))
        .collect();
    let c = m.daemonset_container();
    let mounts: Vec<(String, &Yaml)> = c["volumeMounts"]
        .as_vec()
        .expect("volumeMounts")
        .iter()
        .map(|mnt| {
            let name = mnt["name"].as_str().expect("mount name");
            let volume = volumes
                .get(name)
                .unwrap_or_else(|| panic!("no volume {name}"));
            (
                mnt["mountPath"].as_str().expect("mountPath").to_string(),
                *volume,
            )
        })
        .collect();
    for volume in volumes.values() {
        if let Some(name) = volume["configMap"]["name"].as_str() {
            m.config_map(name);
        }
    }
    let mount_of = |path: &str| -> (&str, &Yaml) {
        mounts
            .iter()
            .filter(|(dir, _)| Path::new(path).starts_with(dir))
            .max_by_key(|(dir, _)| dir.len())
            .map(|(dir, v)| (dir.as_str(), *v))
            .unwrap_or_else(|| panic!("{path} is not inside any volume mount"))
    };
    let args = str_list(&c["args"]);
    let config_arg = args
        .iter()
        .skip_while(|a| *a != "--config")
        .nth(1)
        .expect("the container passes --config");
    let (_, volume) = mount_of(config_arg);
    assert_eq!(
        volume["configMap"]["name"].as_str(),
        Some("steerdns-config")
    );

    let config = m.config();
    let field = |section: &str, key: &str| -> String {
        config[section][key]
            .as_str()
            .unwrap_or_else(|| panic!("[{section}] {key}"))
            .to_string()
    };
    let zones = field("server", "zones");
    assert_eq!(
        mount_of(&format!("{zones}/x.zone")).1["configMap"]["name"].as_str(),
        Some("steerdns-zones")
    );
    let control = field("control", "file");
    let (_, volume) = mount_of(&control);
    assert_eq!(
        volume["configMap"]["name"].as_str(),
        Some("steerdns-control")
    );
    let control_key = Path::new(&control).file_name().expect("file name");
    assert!(
        m.config_map("steerdns-control")["data"][control_key.to_str().expect("utf-8")]
            .as_str()
            .is_some(),
        "steerdns-control has the key the config names"
    );
    let history = field("control", "history_dir");
    assert!(
        mount_of(&history).1["emptyDir"].as_hash().is_some(),
        "the control history goes to the writable emptyDir"
    );
    let token = field("admin", "token_file");
    assert_eq!(
        mount_of(&token).1["secret"]["secretName"].as_str(),
        Some("steerdns-admin-token")
    );
}

/// The config, zones and control file the ConfigMaps carry load cleanly (`steerdns check`),
/// laid out in a scratch directory the way the pod mounts them.
#[test]
fn configmap_data_passes_steerdns_check() {
    let m = load_manifests();
    let root = scratch("configmaps");
    let data = |name: &str| -> Vec<(String, String)> {
        m.config_map(name)["data"]
            .as_hash()
            .expect("data")
            .iter()
            .map(|(k, v)| {
                let key = k.as_str().expect("key").to_string();
                (key, v.as_str().expect("value").to_string())
            })
            .collect()
    };
    let write_all = |dir: &Path, entries: Vec<(String, String)>| {
        fs::create_dir_all(dir).expect("mkdir");
        for (key, value) in entries {
            fs::write(dir.join(key), value).expect("write");
        }
    };
    write_all(&root.join("zones"), data("steerdns-zones"));
    write_all(&root.join("control"), data("steerdns-control"));
    let config = data("steerdns-config")
        .into_iter()
        .find(|(k, _)| k == "steerdns.toml")
        .expect("steerdns.toml")
        .1;
    let root_text = root.to_str().expect("utf-8 path");
    let config = config
        .replace("/etc/steerdns", root_text)
        .replace("/var/lib/steerdns", &format!("{root_text}/state"));
    let config_path = root.join("steerdns.toml");
    fs::write(&config_path, config).expect("write config");
    steerdns_check(&config_path);
    let zone_files = fs::read_dir(root.join("zones")).expect("zones").count();
    assert!(zone_files >= 1, "steerdns-zones has zone files");
}

/// The `[server.tls]` example, appended to the host example as deploy/README.md says, passes
/// `steerdns check` with a real certificate where it names one, and listens on the service
/// addresses of `listen` only (a reply must leave from the address the query came to).
#[test]
fn the_tls_example_passes_steerdns_check_on_the_service_addresses() {
    let host = scratch("etc-tls");
    fs::create_dir_all(host.join("state")).expect("mkdir");
    fs::create_dir_all(host.join("tls")).expect("mkdir");
    let snippet = read(&deploy("etc/steerdns/steerdns-tls.toml"));
    let host_text = format!("{}\n{snippet}", read(&deploy("etc/steerdns/steerdns.toml")))
        .replace("/var/lib/steerdns", &format!("{}/state", host.display()));
    fs::write(host.join("steerdns.toml"), &host_text).expect("write");
    copy_dir(&repo_path("zones"), &host.join("zones"));
    fs::copy(
        deploy("etc/steerdns/control.toml.initial"),
        host.join("state/control.toml"),
    )
    .expect("copy control");
    let (_, key) = common::self_signed_cert(&host.join("tls"), "fullchain", 90);
    fs::rename(key, host.join("tls/privkey.pem")).expect("rename key");
    steerdns_check(&host.join("steerdns.toml"));

    let config: toml::Table = host_text.parse().expect("the combined example is TOML");
    let server = config["server"].as_table().expect("[server]");
    let ip_of = |addr: &toml::Value| {
        addr.as_str()
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .map(|a| a.ip())
            .expect("a socket address")
    };
    let service: BTreeSet<_> = server["listen"]
        .as_array()
        .expect("listen")
        .iter()
        .map(ip_of)
        .collect();
    let tls = server["tls"].as_table().expect("[server.tls]");
    for (transport, port) in [("dot", 853), ("doq", 853), ("doh", 443)] {
        let addrs = tls[transport].as_array().expect("a list of addresses");
        assert!(!addrs.is_empty(), "{transport}: no address in the example");
        for addr in addrs {
            assert!(
                service.contains(&ip_of(addr)),
                "{transport} {addr} is not one of the service addresses {service:?}"
            );
            assert!(
                addr.as_str()
                    .is_some_and(|a| a.ends_with(&format!(":{port}"))),
                "{transport} {addr}: expected port {port}"
            );
        }
    }
}

/// The host example (/etc/steerdns) and the container image's config load cleanly too.
#[test]
fn example_configs_pass_steerdns_check() {
    let host = scratch("etc");
    fs::create_dir_all(host.join("state")).expect("mkdir");
    let host_text = read(&deploy("etc/steerdns/steerdns.toml"))
        .replace("/var/lib/steerdns", &format!("{}/state", host.display()));
    fs::write(host.join("steerdns.toml"), host_text).expect("write");
    copy_dir(&repo_path("zones"), &host.join("zones"));
    fs::copy(
        deploy("etc/steerdns/control.toml.initial"),
        host.join("state/control.toml"),
    )
    .expect("copy control");
    steerdns_check(&host.join("steerdns.toml"));

    let image = scratch("container");
    fs::create_dir_all(image.join("state")).expect("mkdir");
    fs::create_dir_all(image.join("geoip")).expect("mkdir");
    let image_text = read(&deploy("container/steerdns.toml"))
        .replace("/var/lib/steerdns", &format!("{}/state", image.display()));
    fs::write(image.join("steerdns.toml"), image_text).expect("write");
    copy_dir(&repo_path("zones"), &image.join("zones"));
    fs::copy(
        repo_path("geoip/example.mmdb"),
        image.join("geoip/example.mmdb"),
    )
    .expect("mmdb");
    fs::copy(repo_path("control.toml"), image.join("state/control.toml")).expect("control");
    steerdns_check(&image.join("steerdns.toml"));

    // What the Containerfile copies must exist in the build context.
    for line in read(&deploy("container/Containerfile")).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"COPY") && !line.contains("--from=") {
            let sources = words[1..words.len() - 1]
                .iter()
                .filter(|w| !w.starts_with("--"));
            for source in sources {
                assert!(
                    repo_path(source).exists(),
                    "Containerfile copies missing {source}"
                );
            }
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            fs::copy(&path, to.join(path.file_name().expect("name"))).expect("copy");
        }
    }
}

#[test]
fn kustomize_builds_the_manifests() {
    // kubectl is not needed to run steerdns, but it is what users build deploy/kubernetes with:
    // its kustomize must accept the tree (Debian's kubernetes-client; `.ci/run` installs it).
    if skipped("kubectl") {
        return;
    }
    let dir = deploy("kubernetes");
    let output = run_tool(
        "kubectl",
        "kubernetes-client",
        &["kustomize", &dir.display().to_string()],
    );
    assert!(
        output.status.success(),
        "kubectl kustomize:\n{}",
        text(&output)
    );
    let built = YamlLoader::load_from_str(&String::from_utf8_lossy(&output.stdout))
        .expect("kustomize output is YAML");
    let kinds: BTreeSet<&str> = built.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(kinds.contains("DaemonSet") && kinds.contains("PodDisruptionBudget"));
}

// ---------------------------------------------------------------------------------------------
// systemd

/// `[Section]` → key → values (a key may repeat, e.g. SystemCallFilter).
fn parse_unit(text: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut sections: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut current = String::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_string();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("steerdns.service:{}: not key=value: {line}", n + 1));
        assert!(
            !current.is_empty(),
            "steerdns.service:{}: outside a section",
            n + 1
        );
        sections
            .entry(current.clone())
            .or_default()
            .entry(key.trim().to_string())
            .or_default()
            .push(value.trim().to_string());
    }
    sections
}

#[test]
fn systemd_unit_has_the_required_directives() {
    let unit = parse_unit(&read(&deploy("systemd/steerdns.service")));
    let service = &unit["Service"];
    let one = |key: &str| -> &str {
        let values = service
            .get(key)
            .unwrap_or_else(|| panic!("[Service] {key}= missing"));
        assert_eq!(values.len(), 1, "{key}= set more than once");
        &values[0]
    };
    let expected = [
        ("User", "steerdns"),
        ("Group", "steerdns"),
        ("AmbientCapabilities", "CAP_NET_BIND_SERVICE"),
        ("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("Restart", "on-failure"),
        ("ReadWritePaths", "/var/lib/steerdns"),
        ("StateDirectory", "steerdns"),
        (
            "RestrictAddressFamilies",
            "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
        ),
    ];
    for (key, value) in expected {
        assert_eq!(one(key), value, "[Service] {key}=");
    }
    // The server sends READY=1 once it serves (tests/server/sd_notify.rs).
    assert_eq!(one("Type"), "notify");
    assert_eq!(one("NotifyAccess"), "main");
    assert!(service["SystemCallFilter"].contains(&"@system-service".to_string()));
    let exec_start = one("ExecStart");
    assert!(
        exec_start.contains(" serve ")
            && exec_start.contains("--config /etc/steerdns/steerdns.toml"),
        "ExecStart: {exec_start}"
    );
    // The config the unit names keeps its writable state where the unit allows writes.
    let config: toml::Table = read(&deploy("etc/steerdns/steerdns.toml"))
        .parse()
        .expect("toml");
    for key in ["file", "history_dir"] {
        let path = config["control"][key].as_str().expect("[control] path");
        assert!(
            path.starts_with("/var/lib/steerdns/"),
            "[control] {key} = {path}"
        );
    }
    assert_eq!(unit["Install"]["WantedBy"], ["multi-user.target"]);
    // The runbook lets operators in group steerdns run the break-glass commands: the state
    // directory is group-writable and setgid (what they create stays in group steerdns).
    let mode = u32::from_str_radix(one("StateDirectoryMode"), 8).expect("octal mode");
    assert_eq!(mode & 0o2070, 0o2070, "StateDirectoryMode={mode:04o}");
    assert_eq!(
        mode & 0o007,
        0,
        "StateDirectoryMode={mode:04o}: not for other users"
    );
}

/// The configs a production node runs from (the systemd example, the Kubernetes ConfigMap and
/// the container image's default).
fn production_configs() -> Vec<(&'static str, toml::Table)> {
    let file = |relative: &str| -> toml::Table {
        read(&deploy(relative))
            .parse()
            .unwrap_or_else(|e| panic!("{relative}: {e}"))
    };
    vec![
        (
            "etc/steerdns/steerdns.toml",
            file("etc/steerdns/steerdns.toml"),
        ),
        (
            "kubernetes/configmap-config.yaml",
            load_manifests().config(),
        ),
        ("container/steerdns.toml", file("container/steerdns.toml")),
    ]
}

/// Issue 12 item 13: response rate limiting is on in production, and decision traces are
/// shown to loopback and single hosts only (never a whole private range such as 10.0.0.0/8,
/// which in a cluster is every pod).
#[test]
fn production_templates_rate_limit_and_trace_only_to_loopback_or_single_hosts() {
    for (name, config) in production_configs() {
        let rrl = config
            .get("rrl")
            .and_then(|r| r.as_table())
            .unwrap_or_else(|| panic!("{name}: no [rrl]"));
        assert_eq!(
            rrl.get("enabled").and_then(toml::Value::as_bool),
            Some(true),
            "{name}: [rrl] enabled"
        );
        let allow = config
            .get("trace")
            .and_then(|t| t.get("allow"))
            .and_then(toml::Value::as_array)
            .map(|a| str_values(a))
            .unwrap_or_default();
        for network in allow {
            let net: ipnet::IpNet = network
                .parse()
                .unwrap_or_else(|e| panic!("{name}: [trace] allow {network}: {e}"));
            let host = net.prefix_len() == net.max_prefix_len();
            assert!(
                net.addr().is_loopback() || host,
                "{name}: [trace] allow {network}: only loopback or single hosts"
            );
        }
    }
}

fn str_values(values: &[toml::Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

/// `systemd-analyze verify` (ExecStart pointed at the freshly built binary, since
/// /usr/local/bin/steerdns is not installed here) must print nothing about the unit, and
/// `systemd-analyze security --offline` must rate it well hardened.
#[test]
fn systemd_analyze_verifies_the_unit() {
    if skipped("systemd") {
        return;
    }
    let dir = scratch("systemd");
    let unit_path = dir.join("steerdns.service");
    let unit = read(&deploy("systemd/steerdns.service"))
        .replace("/usr/local/bin/steerdns", env!("CARGO_BIN_EXE_steerdns"));
    fs::write(&unit_path, unit).expect("write unit");
    let unit_arg = unit_path.to_str().expect("utf-8 path");

    let verify = run_tool("systemd-analyze", "systemd", &["verify", unit_arg]);
    let said = text(&verify);
    assert!(verify.status.success(), "systemd-analyze verify:\n{said}");
    // verify exits 0 on unknown keys and bad values, only warning: any line about our unit
    // is a finding.
    let findings: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("steerdns.service"))
        .collect();
    assert!(findings.is_empty(), "systemd-analyze verify:\n{said}");

    let security = run_tool(
        "systemd-analyze",
        "systemd",
        &["security", "--offline=yes", "--no-pager", unit_arg],
    );
    let said = text(&security);
    let exposure: f64 = said
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for steerdns.service:")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{said}"));
    assert!(
        exposure <= 2.0,
        "exposure {exposure} (want <= 2.0):\n{said}"
    );
}

/// sysusers creates the account and tmpfiles the state directory with the first control file,
/// applied to a scratch root.
#[test]
fn sysusers_and_tmpfiles_prepare_the_state_directory() {
    if skipped("systemd") {
        return;
    }
    let root = scratch("root");
    fs::create_dir_all(root.join("etc/steerdns")).expect("mkdir");
    fs::copy(
        deploy("etc/steerdns/control.toml.initial"),
        root.join("etc/steerdns/control.toml.initial"),
    )
    .expect("copy");
    let root_arg = format!("--root={}", root.display());
    let sysusers = deploy("systemd/steerdns.sysusers");
    let out = run_tool(
        "systemd-sysusers",
        "systemd",
        &[&root_arg, sysusers.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "systemd-sysusers:\n{}", text(&out));
    let passwd = read(&root.join("etc/passwd"));
    let entry = passwd
        .lines()
        .find(|l| l.starts_with("steerdns:"))
        .unwrap_or_else(|| panic!("no steerdns in passwd:\n{passwd}"));
    let fields: Vec<&str> = entry.split(':').collect();
    assert_ne!(fields[2], "0", "steerdns must not be uid 0");
    assert_eq!(fields[5], "/var/lib/steerdns");
    assert_eq!(fields[6], "/usr/sbin/nologin");

    let tmpfiles = deploy("systemd/steerdns.tmpfiles");
    let run_tmpfiles = || {
        let out = run_tool(
            "systemd-tmpfiles",
            "systemd",
            &["--create", &root_arg, tmpfiles.to_str().expect("utf-8")],
        );
        assert!(out.status.success(), "systemd-tmpfiles:\n{}", text(&out));
    };
    run_tmpfiles();
    let state = root.join("var/lib/steerdns");
    let control = state.join("control.toml");
    assert_eq!(
        read(&control),
        read(&deploy("etc/steerdns/control.toml.initial")),
        "the first control file is the packaged one"
    );
    assert!(
        root.join("run/steerdns").is_dir(),
        "/run/steerdns for load feeds"
    );
    // Operators in group steerdns may edit the control file (the runbook's break-glass).
    let mode = fs::metadata(&control).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o660, "control.toml mode {mode:04o}");
    // What StateDirectory= does at service start: the state belongs to steerdns. tmpfiles must
    // still run cleanly afterwards (at every boot) and keep an operator's changes.
    let uid: u32 = fields[2].parse().expect("uid");
    let gid: u32 = fields[3].parse().expect("gid");
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let as_root = unsafe { libc::geteuid() } == 0;
    assert!(
        as_root,
        "tmpfiles over a steerdns-owned dir needs root to chown it (.ci/run runs as root), or \
         set STEERDNS_LINT_SKIP=systemd to skip the systemd checks explicitly"
    );
    std::os::unix::fs::chown(&state, Some(uid), Some(gid)).expect("chown state dir");
    std::os::unix::fs::chown(&control, Some(uid), Some(gid)).expect("chown control");
    fs::write(&control, "# changed by an operator\n").expect("write");
    run_tmpfiles();
    assert_eq!(read(&control), "# changed by an operator\n");
}

// ---------------------------------------------------------------------------------------------
// BIRD and shell

#[test]
fn bird_parses_the_example_config() {
    if skipped("bird") {
        return;
    }
    let config = deploy("bird/bird.conf");
    let out = run_tool(
        "bird",
        "bird2",
        &["-p", "-c", config.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "bird -p:\n{}", text(&out));
    // The health check toggles protocols by this pattern; the config must define them.
    let conf = read(&config);
    for proto in [
        "protocol static anycast_dns4",
        "protocol static anycast_dns6",
    ] {
        assert!(conf.contains(proto), "bird.conf lacks `{proto}`");
    }
    assert!(read(&deploy("bird/healthcheck.sh")).contains(r#""anycast_dns*""#));
}

#[test]
fn shell_scripts_parse() {
    let mut scripts = Vec::new();
    collect_scripts(&repo_path("deploy"), &mut scripts);
    assert!(!scripts.is_empty(), "no shell scripts under deploy/");
    for script in scripts {
        let out = run_tool("bash", "bash", &["-n", script.to_str().expect("utf-8")]);
        assert!(
            out.status.success(),
            "bash -n {}:\n{}",
            script.display(),
            text(&out)
        );
    }
}

/// Every script under deploy/ and the test that runs it: a new script fails this until it has
/// one (issue 28: `fleet/demo.sh` aborted on a fresh checkout and nothing noticed).
const SCRIPTS_RUN_BY: &[(&str, &str)] = &[
    (
        "bird/healthcheck.sh",
        "healthcheck_check_passes_only_when_every_zone_answers",
    ),
    (
        "fleet/demo.sh",
        "the_fleet_demo_starts_converges_a_weight_change_and_cleans_up",
    ),
];

#[test]
fn every_deploy_script_is_run_by_a_test() {
    let mut scripts = Vec::new();
    collect_scripts(&repo_path("deploy"), &mut scripts);
    let found: BTreeSet<String> = scripts
        .iter()
        .map(|p| {
            let relative = p.strip_prefix(repo_path("deploy")).expect("under deploy/");
            relative.display().to_string()
        })
        .collect();
    let listed: BTreeSet<String> = SCRIPTS_RUN_BY.iter().map(|(s, _)| s.to_string()).collect();
    assert_eq!(
        found, listed,
        "scripts under deploy/ vs the ones a test runs"
    );
    let this_file = read(&repo_path("tests/server/deploy_lint.rs"));
    for (script, test) in SCRIPTS_RUN_BY {
        assert!(
            this_file.contains(&format!("fn {test}()")),
            "{script}: no test {test}"
        );
    }
}

fn collect_scripts(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            collect_scripts(&path, out);
        } else if path.extension().is_some_and(|e| e == "sh") {
            out.push(path);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The BIRD health check against a real server

fn healthcheck(port: u16) -> Command {
    let mut command = Command::new("bash");
    command
        .arg(deploy("bird/healthcheck.sh"))
        .env("SERVER", "127.0.0.1")
        .env("PORT", port.to_string())
        .env("ZONES", "example.com edge.example.net")
        .env("MAINTENANCE_FILE", "")
        // Never reach a real BIRD from a test.
        .env("WITHDRAW_CMD", "false")
        .env("ANNOUNCE_CMD", "false");
    command
}

fn check_status(mut command: Command) -> Option<i32> {
    command
        .arg("check")
        .output()
        .expect("run healthcheck.sh")
        .status
        .code()
}

#[test]
fn healthcheck_check_passes_only_when_every_zone_answers() {
    let server = Server::start(&[]);
    let port = server.port();
    assert_eq!(check_status(healthcheck(port)), Some(0), "serving: healthy");

    let mut unknown_zone = healthcheck(port);
    unknown_zone.env("ZONES", "example.com not-served.example.org");
    assert_eq!(
        check_status(unknown_zone),
        Some(1),
        "REFUSED for a zone: unhealthy"
    );

    let maintenance = scratch("maintenance").join("maintenance");
    fs::write(&maintenance, "").expect("touch");
    let mut draining = healthcheck(port);
    draining.env("MAINTENANCE_FILE", &maintenance);
    assert_eq!(
        check_status(draining),
        Some(1),
        "maintenance file: unhealthy"
    );

    drop(server);
    let started = Instant::now();
    assert_eq!(
        check_status(healthcheck(port)),
        Some(1),
        "stopped: unhealthy"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the probe is bounded"
    );
}

/// `run`: announce after RISE good probes, withdraw after FALL bad ones when the server dies,
/// announce again when a server is back on the same port; each exactly once.
#[test]
fn healthcheck_run_withdraws_and_reannounces() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let log = scratch("healthcheck-run").join("route.log");
    fs::write(&log, "").expect("create log");
    let mut command = healthcheck(port);
    command
        .arg("run")
        .env("INTERVAL", "0.1")
        .env("RISE", "2")
        .env("FALL", "2")
        .env("ROUNDS", "600") // bounded: at most about a minute even if nobody kills it
        .env(
            "ANNOUNCE_CMD",
            format!("echo announce >> '{}'", log.display()),
        )
        .env(
            "WITHDRAW_CMD",
            format!("echo withdraw >> '{}'", log.display()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let server = Server::start(&["--listen", &listen]);
    let mut checker = KillOnDrop(command.spawn().expect("start healthcheck.sh run"));

    wait_for_log(&log, &["announce"]);
    drop(server);
    wait_for_log(&log, &["announce", "withdraw"]);
    let back = Server::start(&["--listen", &listen]);
    wait_for_log(&log, &["announce", "withdraw", "announce"]);
    // Steady again: no further route changes over six more probes (each asks the server for
    // the SOA of both zones), three times RISE and FALL.
    let admin = back.admin.expect("the server reports its admin address");
    let queries = || hostile_common::metric(admin, "steerdns_queries_total", &[]);
    let probed = queries() + 12.0;
    common::wait_for("six more probes", Duration::from_secs(15), || {
        (queries() >= probed).then_some(())
    });
    assert_eq!(
        read(&log).lines().collect::<Vec<_>>(),
        ["announce", "withdraw", "announce"]
    );
    let _ = checker.0.kill();
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_log(log: &Path, expected: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = read(log);
        let lines: Vec<&str> = text.lines().collect();
        if lines == expected {
            return;
        }
        assert!(
            lines.len() <= expected.len() && expected.starts_with(&lines),
            "route changes {lines:?}, expected {expected:?}"
        );
        assert!(
            Instant::now() < deadline,
            "timed out: route changes {lines:?}, expected {expected:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// The local fleet demo, run for real

/// A port `base` such that `base + 1 ..= base + n` are free for TCP and UDP on loopback.
fn free_run(n: u16) -> u16 {
    for _ in 0..100 {
        let base = free_port();
        let all_free = (1..=n).all(|i| {
            base.checked_add(i).is_some_and(|p| {
                std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()
                    && std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok()
            })
        });
        if all_free {
            return base;
        }
    }
    panic!("no run of {n} free ports");
}

/// The demo in a process group of its own; on drop the whole group is killed (the script's
/// etcd and nodes too, should the test fail before the script's own cleanup).
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let group = self.0.id() as i32;
        // SAFETY: signals the process group this test created (its id is the child's pid).
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

#[test]
fn the_fleet_demo_starts_converges_a_weight_change_and_cleans_up() {
    use std::os::unix::process::CommandExt;
    let etcd_port = free_run(2) + 1;
    let dns_base = free_run(3);
    let admin_base = free_run(3);
    let steerdns = env!("CARGO_BIN_EXE_steerdns");
    let mut demo = Demo(
        Command::new("bash")
            .arg(deploy("fleet/demo.sh"))
            .env("BIN", steerdns)
            .env("ETCD_PORT", etcd_port.to_string())
            .env("DNS_BASE", dns_base.to_string())
            .env("ADMIN_BASE", admin_base.to_string())
            .env(
                "PREFIX",
                format!("/steerdns/demo-test-{}", std::process::id()),
            )
            .env("STEERDNS_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("run deploy/fleet/demo.sh (etcd is needed: apt-get install etcd-server)"),
    );
    let lines = common::lines_of(demo.0.stdout.take().expect("stdout"));
    let errors = common::lines_of(demo.0.stderr.take().expect("stderr"));
    let mut banner = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !banner
        .last()
        .is_some_and(|l: &String| l.starts_with("Ctrl-C stops"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => banner.push(line),
            Err(_) => {
                let stderr: Vec<String> = errors.try_iter().collect();
                panic!("demo.sh did not start: stdout {banner:#?}, stderr {stderr:#?}");
            }
        }
    }
    let work = banner
        .iter()
        .find_map(|l| {
            l.split_once("(logs and caches in ")?
                .1
                .strip_suffix(").")
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| panic!("no work directory in {banner:#?}"));
    let config = work.join("ns1/steerdns.toml");
    assert!(config.is_file(), "{} (from {banner:#?})", config.display());
    // Every node answers.
    let serial = |port: u16| {
        let query = common::query("serial.steerdns.", hickory_proto::rr::RecordType::TXT);
        let mut query = query;
        query.queries[0].set_query_class(hickory_proto::rr::DNSClass::CH);
        let raw = common::udp_once(
            SocketAddr::from(([127, 0, 0, 1], port)),
            &query.to_vec().expect("encode"),
            Duration::from_secs(2),
        )
        .unwrap_or_else(|| panic!("node on port {port} does not answer"));
        let answer = hickory_proto::op::Message::from_vec(&raw).expect("an answer");
        answer
            .answers
            .first()
            .map(|r| r.data.to_string())
            .unwrap_or_default()
    };
    for i in 1..=3 {
        assert!(!serial(dns_base + i).is_empty(), "ns{i} has no serial");
    }
    // The break-glass command the banner prints converges on every node.
    let out = Command::new(steerdns)
        .args([
            "weight",
            "set",
            "critical",
            "frontdoor=0",
            "alt-cdn=100",
            "--config",
        ])
        .arg(&config)
        .output()
        .expect("run steerdns weight set");
    let said = text(&out);
    assert!(out.status.success(), "weight set: {said}");
    assert!(said.contains("all 3 live nodes serve"), "{said}");
    let served: BTreeSet<String> = (1..=3).map(|i| serial(dns_base + i)).collect();
    assert_eq!(
        served.len(),
        1,
        "the nodes serve different serials: {served:?}"
    );
    // Ctrl-C: the script stops etcd and the nodes and removes its directory.
    // SAFETY: signals the script's process (its pid), which this test started.
    unsafe { libc::kill(demo.0.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = demo.0.try_wait().expect("wait for demo.sh") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "demo.sh still running 20 s after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "demo.sh after SIGINT: {status:?}");
    assert!(!work.exists(), "{} left behind", work.display());
    for port in [etcd_port, admin_base + 1, admin_base + 2, admin_base + 3] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} still served after the demo stopped"
        );
    }
}
