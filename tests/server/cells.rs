//! Cells over real sockets (issue 31): with the bundled example's `[topology.cells]`, each
//! tenant's anycast answers carry its own k cells of the layer its client is sent to — two
//! tenants, two different pairs; a tenant's `cells = 3`, three — while names without a tenant
//! answer exactly as before, and the ECS scope is the one the answer had without cells.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

use crate::common::{ecs_query, query, repo_path, Server};
use crate::steering_common::{
    a_records, aaaa_records, assert_noerror, scope, Exchanger, Setup, GLOBAL_V4, GLOBAL_V6,
};

/// A client of eu-west in the bundled database (located by its /24).
const EU_WEST: &str = "81.2.69.0/24";

fn global_cells_v4() -> BTreeSet<Ipv4Addr> {
    (101..=106).map(|n| Ipv4Addr::new(192, 0, 2, n)).collect()
}

fn eu_north_cells_v4() -> BTreeSet<Ipv4Addr> {
    (151..=153)
        .map(|n| Ipv4Addr::new(198, 51, 100, n))
        .collect()
}

/// The example with these tenants' documents (the repo's, or the text given) and `control`.
fn start(control: &str, tenants: &[(&str, Option<&str>)]) -> (Setup, Server) {
    let setup = Setup::new("", control);
    let dir = setup.dir.path().join("tenants");
    std::fs::create_dir_all(&dir).expect("mkdir tenants");
    for (name, text) in tenants {
        let file = dir.join(format!("{name}.toml"));
        match text {
            Some(text) => std::fs::write(&file, text).expect("write tenant"),
            None => {
                std::fs::copy(repo_path(&format!("tenants/{name}.toml")), &file)
                    .map(drop)
                    .expect("copy the example's tenant");
            }
        }
    }
    let server = setup.start(&[]);
    (setup, server)
}

/// Asks until the answer has `count` A records (the tenants are read at start, in the
/// background of the first answers); fails after 20 s.
fn wait_for_count(client: &Exchanger, name: &str, count: usize) -> Message {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = client.one(&query(name, RecordType::A));
        assert_noerror(&r, name);
        if a_records(&r).len() == count {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: {:?}, wanted {count} addresses",
            a_records(&r)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn set(addresses: Vec<Ipv4Addr>) -> BTreeSet<Ipv4Addr> {
    addresses.into_iter().collect()
}

#[test]
fn cells_each_tenant_answers_with_its_own_pair() {
    let wide = "names = [\"wide.edge.example.net.\"]\ncells = 3\n";
    let (_setup, server) = start(
        "",
        &[
            ("fabrikam", None),
            ("northwind", None),
            ("wide", Some(wide)),
        ],
    );
    let client = Exchanger::new(&server);
    let fabrikam = set(a_records(&wait_for_count(
        &client,
        "fabrikam.edge.example.net.",
        2,
    )));
    let northwind = set(a_records(&wait_for_count(
        &client,
        "northwind.edge.example.net.",
        2,
    )));
    let wide = set(a_records(&wait_for_count(
        &client,
        "wide.edge.example.net.",
        3,
    )));
    println!("fabrikam {fabrikam:?}, northwind {northwind:?}, wide {wide:?}");
    for (tenant, cells) in [
        ("fabrikam", &fabrikam),
        ("northwind", &northwind),
        ("wide", &wide),
    ] {
        assert!(cells.is_subset(&global_cells_v4()), "{tenant}: {cells:?}");
    }
    assert_ne!(fabrikam, northwind, "two tenants, two shards");

    // AAAA: the same cells' IPv6 addresses (cell n is 192.0.2.n and 2001:db8::n).
    let r = client.one(&query("fabrikam.edge.example.net.", RecordType::AAAA));
    let v6: BTreeSet<u16> = aaaa_records(&r).iter().map(|a| a.segments()[7]).collect();
    let v4: BTreeSet<u16> = fabrikam
        .iter()
        .map(|a| format!("{}", a.octets()[3]))
        .map(|n| u16::from_str_radix(&n, 16).unwrap_or(0))
        .collect();
    assert_eq!(v6, v4, "fabrikam AAAA {:?}", aaaa_records(&r));

    // Nothing decided by the client: scope 0, with cells as without.
    let r = client.one(&ecs_query(
        "fabrikam.edge.example.net.",
        RecordType::A,
        EU_WEST,
    ));
    assert_eq!(set(a_records(&r)), fabrikam);
    assert_eq!(scope(&r), 0);

    // A name without a tenant answers as before.
    let r = client.one(&query("contoso.edge.example.net.", RecordType::A));
    assert_eq!(a_records(&r), vec![GLOBAL_V4]);
    let r = client.one(&query("contoso.edge.example.net.", RecordType::AAAA));
    assert_eq!(aaaa_records(&r), vec![GLOBAL_V6]);
    let r = client.one(&ecs_query(
        "contoso.edge.example.net.",
        RecordType::A,
        EU_WEST,
    ));
    assert_eq!((a_records(&r), scope(&r)), (vec![GLOBAL_V4], 0));
}

#[test]
fn cells_a_drained_region_sends_a_tenant_to_its_cells_in_the_neighbour() {
    // eu-west drained: its clients go to eu-north (its first neighbour), which has cells.
    let (_setup, server) = start("[regions.eu-west]\ndrain = true\n", &[("fabrikam", None)]);
    let client = Exchanger::new(&server);
    wait_for_count(&client, "fabrikam.edge.example.net.", 2);
    let r = client.one(&ecs_query(
        "fabrikam.edge.example.net.",
        RecordType::A,
        EU_WEST,
    ));
    let got = set(a_records(&r));
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.is_subset(&eu_north_cells_v4()), "{got:?}");
    assert_eq!(
        scope(&r),
        24,
        "the client's location decided, as without cells"
    );
    let r = client.one(&ecs_query(
        "contoso.edge.example.net.",
        RecordType::A,
        EU_WEST,
    ));
    assert_eq!(a_records(&r), vec![Ipv4Addr::new(198, 51, 100, 5)]);
    assert_eq!(scope(&r), 24);
}
