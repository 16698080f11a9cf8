//! The control store's contract (`steerdns::control::store::contract`) against the etcd
//! implementation on a real etcd, the same check the file store's unit test runs; and that it
//! keeps the fleet's key layout (`<prefix>/control`, `<prefix>/history/<serial>`).

use crate::common;

use common::etcd::Etcd;
use steerdns::config::fleet::FleetConfig;
use steerdns::control::store::{contract, ControlStore, CONTROL};
use steerdns::fleet::control_store::EtcdStore;

fn fleet_config(etcd: &Etcd, prefix: &str) -> FleetConfig {
    toml::from_str(&format!(
        "etcd = [{:?}]\nprefix = {prefix:?}\n",
        etcd.endpoint()
    ))
    .expect("a fleet section with endpoint and prefix parses")
}

fn text(n: u64) -> String {
    format!("serial = 1\n\n[regions.r{n}]\ndrain = true\n")
}

#[test]
fn the_etcd_store_keeps_the_contract_on_the_fleet_keys() {
    let etcd = Etcd::start();
    let fleet = fleet_config(&etcd, "/contract");
    let store = EtcdStore::connect(&fleet, 3).expect("connects to the test etcd");
    contract::check(&store, 3, text).expect("the etcd store keeps the contract");

    // The same keys a running fleet reads: the control text, and three history entries.
    let current = store.current(CONTROL).unwrap().unwrap();
    let control = etcd.etcdctl(&["get", "/contract/control", "--print-value-only"]);
    assert_eq!(control.trim_end(), current.text.trim_end());
    let history = etcd.etcdctl(&["get", "/contract/history/", "--prefix", "--keys-only"]);
    let keys: Vec<&str> = history.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(keys.len(), 3, "{history}");
    assert!(
        keys.last()
            .is_some_and(|k| k.ends_with(&format!("{:020}", current.serial))),
        "{history}"
    );
    assert_eq!(store.watch_key(CONTROL).unwrap(), "/contract/control");
}
