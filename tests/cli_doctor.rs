//! `quorumlock doctor` against real servers configured each way: healthy, broken (a replica,
//! an evicting policy, one server under two URLs), volatile with and without quarantine, an
//! ACL user that may not read the configuration, a node that is down; that it writes nothing;
//! and its usage errors.

mod common;

use std::collections::BTreeMap;

use common::cli::{assert_bad_input, binary, nowhere, outcome, BadInput, BIN};
use quorumlock::testkit::{LocalNode, LocalQuorum, NodeOptions, Reply};
use serde_json::Value;
use tokio::process::Command;

/// The binary with no `QUORUMLOCK_*` variable but the two below and `QUORUMLOCK_NODES=urls`
/// (unless empty), running `doctor ARGS --window 1s` (unless ARGS has a window).
///
/// The library measures a node's clock rate from two `TIME` replies, each timed at the middle
/// of its round trip, and does not allow for that estimate's error: a stall of the client or
/// the server between sending `TIME` and reading its reply shifts the rate by about
/// stall / window. Over a 100 ms window a healthy local node reads from -5% to +7% on a quiet
/// two-core machine, and -52% under load (a 50 ms stall); over 1 s, within 0.5% when quiet.
/// So: a 1 s window and a drift factor of 0.5, which keep the clock check out of tests about
/// everything else unless a stall outlasts 500 ms. And a generous node timeout, so that a busy
/// machine does not turn a healthy node's `TIME` or `INFO` into an unknown.
fn doctor(urls: &[String], args: &[&str]) -> Command {
    let mut c = binary(urls);
    c.env("QUORUMLOCK_DRIFT_FACTOR", "0.5")
        .env("QUORUMLOCK_NODE_TIMEOUT", "2s")
        .arg("doctor")
        .args(args);
    if !args.contains(&"--window") {
        c.args(["--window", "1s"]);
    }
    c
}

/// `doctor --json`: the exit code and the document (checked against the exit code).
async fn json(urls: &[String], env: &[(&str, &str)]) -> (Option<i32>, Value) {
    let mut cli = doctor(urls, &["--json"]);
    cli.envs(env.iter().copied());
    let out = outcome(&mut cli).await;
    assert_eq!(out.stderr, "", "{out:?}");
    let doc: Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    assert_eq!(
        doc["exit_code"].as_i64(),
        out.code.map(i64::from),
        "{doc:#}"
    );
    (out.code, doc)
}

/// `doctor` (the table): the exit code and stdout.
async fn human(urls: &[String], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cli = doctor(urls, &[]);
    cli.envs(env.iter().copied());
    let out = outcome(&mut cli).await;
    assert_eq!(out.stderr, "", "{out:?}");
    (out.code, out.stdout)
}

/// The messages of node `i`'s findings, each prefixed with its severity.
fn findings(doc: &Value, i: usize) -> Vec<String> {
    messages(&doc["nodes"][i]["findings"])
}

/// The messages of a list of findings, each prefixed with its severity.
fn messages(findings: &Value) -> Vec<String> {
    findings
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            format!(
                "{}: {}",
                f["severity"].as_str().unwrap(),
                f["message"].as_str().unwrap()
            )
        })
        .collect()
}

/// Node `i`'s row in the table (the line starting with its index).
fn row(stdout: &str, i: usize) -> &str {
    stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&i.to_string()))
        .unwrap_or_else(|| panic!("no row for node {i}:\n{stdout}"))
}

/// The overall verdict: the table's last line.
fn last_line(stdout: &str) -> &str {
    stdout.lines().last().unwrap_or_default()
}

fn persistent_with(extra_args: &[&str]) -> NodeOptions {
    NodeOptions {
        extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
        ..NodeOptions::persistent()
    }
}

#[tokio::test]
async fn a_healthy_configuration_is_safe() {
    let q = LocalQuorum::start_with(3, NodeOptions::persistent())
        .await
        .unwrap();
    // The JSON, and the table with the nodes from --nodes rather than QUORUMLOCK_NODES; both
    // at once (each takes the clock window).
    let (urls, nodes_flag) = (q.urls(), q.urls().join(","));
    let down = nowhere();
    let mut table = doctor(&down, &["--nodes", &nodes_flag]);
    let ((code, doc), out) = tokio::join!(json(&urls, &[]), outcome(&mut table));
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(doc["verdict"], "safe", "{doc:#}");
    assert_eq!(doc["quorum"], 2);
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    for (i, node) in nodes.iter().enumerate() {
        let what = format!("node {i}: {node:#}");
        assert_eq!(node["index"], i, "{what}");
        assert_eq!(node["node"], q.node(i).url(), "{what}");
        assert_eq!(node["reachable"], true, "{what}");
        assert_eq!(node["error"], Value::Null, "{what}");
        assert!(node["round_trip_ms"].as_f64().unwrap() > 0.0, "{what}");
        assert!(
            node["version"]
                .as_str()
                .unwrap()
                .starts_with(char::is_numeric),
            "{what}"
        );
        assert_eq!(node["role"], "master", "{what}");
        assert_eq!(node["run_id"].as_str().unwrap().len(), 40, "{what}");
        assert!(node["uptime_s"].as_u64().is_some(), "{what}");
        assert_eq!(node["aof_enabled"], true, "{what}");
        assert_eq!(node["appendfsync"], "always", "{what}");
        assert_eq!(node["maxmemory"], 0, "{what}");
        assert_eq!(node["maxmemory_policy"], "noeviction", "{what}");
        assert!(node["clock_rate"].as_f64().is_some(), "{what}");
        assert_eq!(
            node["drift_factor"], 0.5,
            "QUORUMLOCK_DRIFT_FACTOR applies: {what}"
        );
        // Seconds old, but started empty by the testkit (marked new): not quarantined.
        assert_eq!(node["quarantined_for_s"], Value::Null, "{what}");
        assert_eq!(node["same_server_as"], Value::Null, "{what}");
        assert_eq!(node["refused_commands"], Value::Array(Vec::new()), "{what}");
        // Only a clock note may come up (the measurement is noisy; see `doctor`).
        assert!(
            findings(&doc, i)
                .iter()
                .all(|f| f.starts_with("note: clock")),
            "{what}"
        );
    }

    assert_eq!(out.code, Some(0), "{out:?}");
    let stdout = out.stdout;
    let header = stdout.lines().next().unwrap();
    for column in [
        "node",
        "url",
        "reachable",
        "rtt",
        "version",
        "role",
        "run_id",
        "uptime",
        "persistence",
        "eviction",
        "clock",
        "quarantine",
        "verdict",
    ] {
        assert!(
            header.split_whitespace().any(|c| c == column),
            "{column}:\n{stdout}"
        );
    }
    for (i, node) in nodes.iter().enumerate() {
        let row = row(&stdout, i);
        let run_id = node["run_id"].as_str().unwrap();
        for cell in [
            "yes",
            "master",
            &run_id[..8],
            "aof always",
            "noeviction",
            "(drift 50%)",
        ] {
            assert!(row.contains(cell), "{cell}: {row}");
        }
        assert!(!row.contains(&run_id[..9]), "run_id not shortened: {row}");
        assert!(row.ends_with(" ok") || row.ends_with(" note"), "{row}");
    }
    assert!(
        last_line(&stdout).starts_with("safe")
            && last_line(&stdout).ends_with("(3 of 3 nodes safe, quorum 2)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_broken_configuration_is_unsafe_and_each_problem_is_on_its_node() {
    // Also on ::1: node 1 under two URLs that only its run_id shows to be one server.
    let q = LocalQuorum::start_with(3, persistent_with(&["--bind", "127.0.0.1", "::1"]))
        .await
        .expect("redis-server on 127.0.0.1 and ::1 (is IPv6 loopback configured?)");
    let primary = q.node(0).port().to_string();
    q.node(2)
        .command(&["REPLICAOF", "127.0.0.1", &primary])
        .await
        .unwrap();
    let evicting = LocalQuorum::start_with(
        1,
        persistent_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]),
    )
    .await
    .unwrap();
    let twice = q.node(1).port();
    let urls = vec![
        q.node(0).url(),
        format!("redis://[::1]:{twice}"),
        q.node(2).url(),
        evicting.node(0).url(),
        format!("redis://127.0.0.1:{twice}"),
    ];

    let ((code, doc), (human_code, stdout)) = tokio::join!(json(&urls, &[]), human(&urls, &[]));
    assert_eq!(code, Some(1), "{doc:#}");
    assert_eq!(doc["verdict"], "unsafe", "{doc:#}");
    assert_eq!(doc["quorum"], 3);
    let nodes = &doc["nodes"];
    for i in [0, 1] {
        assert_ne!(nodes[i]["verdict"], "unsafe", "node {i}: {:#}", nodes[i]);
    }
    let unsafe_on = |i: usize, what: &str| {
        let found = findings(&doc, i);
        assert_eq!(nodes[i]["verdict"], "unsafe", "node {i}: {found:?}");
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("unsafe: ") && f.contains(what)),
            "node {i} should say `{what}`: {found:?}"
        );
        for other in (0..5).filter(|j| *j != i) {
            assert!(
                !findings(&doc, other).iter().any(|f| f.contains(what)),
                "`{what}` on node {other}: {doc:#}"
            );
        }
    };
    unsafe_on(2, "replica");
    assert_eq!(nodes[2]["role"], "replica");
    unsafe_on(3, "allkeys-lru");
    assert_eq!(nodes[3]["maxmemory_policy"], "allkeys-lru");
    assert_eq!(nodes[3]["maxmemory"], 100 << 20);
    unsafe_on(4, "same server");
    assert_eq!(nodes[4]["same_server_as"], 1);
    assert_eq!(nodes[4]["run_id"], nodes[1]["run_id"]);

    assert_eq!(human_code, Some(1), "{stdout}");
    assert!(row(&stdout, 2).contains(" replica "), "{stdout}");
    assert!(
        row(&stdout, 3).contains(" allkeys-lru (maxmemory 100mb) "),
        "{stdout}"
    );
    for i in [2, 3, 4] {
        assert!(row(&stdout, i).ends_with(" UNSAFE"), "{stdout}");
    }
    for line in [
        "node 2: unsafe: a replica",
        "node 3: unsafe: maxmemory",
        "node 4: unsafe: the same server (run_id) as node 1",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(line)),
            "{line}:\n{stdout}"
        );
    }
    assert_eq!(
        last_line(&stdout),
        "UNSAFE: nodes 2, 3, 4 are unsafe (2 of 5 nodes safe, quorum 3: too few safe nodes \
         for a quorum, locks need unsafe votes or fail)",
        "{stdout}"
    );
    q.node(2)
        .command(&["REPLICAOF", "NO", "ONE"])
        .await
        .unwrap();
}

/// Removes the marker the testkit writes when it starts a server: servers started by
/// someone else carry nothing that says they started empty (design 2.6a).
async fn unmark(q: &LocalQuorum) {
    for node in q.nodes() {
        let deleted = node.command(&["DEL", "quorumlock:node"]).await.unwrap();
        assert_eq!(deleted, quorumlock::testkit::Reply::Integer(1));
    }
}

#[tokio::test]
async fn volatile_nodes_are_unsafe_without_quarantine_and_unavailable_with_it() {
    let q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .unwrap();
    unmark(&q).await;
    let (urls, max_ttl) = (q.urls(), [("QUORUMLOCK_MAX_TTL", "1m")]);
    let (off, (code, doc), (human_code, stdout)) = tokio::join!(
        json(&urls, &[("QUORUMLOCK_QUARANTINE", "false")]),
        json(&urls, &max_ttl),
        human(&urls, &max_ttl),
    );
    let (off_code, off_doc) = off;
    assert_eq!(off_code, Some(1), "{off_doc:#}");
    assert_eq!(off_doc["verdict"], "unsafe");
    for i in 0..3 {
        let found = findings(&off_doc, i);
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("unsafe: ") && f.contains("quarantine is off")),
            "node {i}: {found:?}"
        );
        assert_eq!(off_doc["nodes"][i]["aof_enabled"], false);
    }

    // Quarantine on (the default), for the longest ttl: 1 minute here. The nodes are seconds
    // old, so each is quarantined for most of that minute: safe, but no lock for now, which
    // fails the doctor as `run` fails, and says until when.
    assert_eq!(code, Some(3), "{doc:#}");
    assert_eq!(doc["verdict"], "unavailable");
    let back = doc["quorum_in_s"].as_f64().expect("a time");
    assert!(back > 0.0 && back <= 60.0, "{doc:#}");
    for i in 0..3 {
        let node = &doc["nodes"][i];
        assert_eq!(node["verdict"], "note", "{node:#}");
        let left = node["quarantined_for_s"].as_f64().expect("quarantined");
        assert!(left > 0.0 && left <= 60.0, "{node:#}");
        let found = findings(&doc, i);
        assert!(found.iter().all(|f| f.starts_with("note: ")), "{found:?}");
        assert!(
            found
                .iter()
                .any(|f| f.contains("quarantined for 1m, then re-seeded")),
            "{found:?}"
        );
    }
    assert_eq!(human_code, Some(3), "{stdout}");
    for i in 0..3 {
        let row = row(&stdout, i);
        assert!(
            row.contains(" aof off ") && row.contains("s left "),
            "{row}"
        );
        assert!(row.ends_with(" note"), "{row}");
    }
    let verdict = last_line(&stdout);
    assert!(verdict.starts_with("UNAVAILABLE for "), "{stdout}");
    assert!(
        verdict
            .contains(": quarantine keeps the nodes from a quorum (3 of 3 nodes safe, quorum 2)"),
        "{stdout}"
    );
}

/// Quarantine that leaves a quorum counted is only a note: two nodes that persist every
/// write and one young node that does not.
#[tokio::test]
async fn a_quorum_out_of_quarantine_is_safe_with_notes() {
    let (persistent, volatile) = tokio::join!(
        LocalQuorum::start_with(2, NodeOptions::persistent()),
        LocalQuorum::start_with(1, NodeOptions::volatile()),
    );
    let (persistent, volatile) = (persistent.unwrap(), volatile.unwrap());
    let urls = [persistent.urls(), volatile.urls()].concat();
    let max_ttl = [("QUORUMLOCK_MAX_TTL", "1m")];
    let ((code, doc), (human_code, stdout)) =
        tokio::join!(json(&urls, &max_ttl), human(&urls, &max_ttl));
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(doc["verdict"], "safe");
    assert_eq!(doc["quorum_in_s"].as_f64(), Some(0.0), "{doc:#}");
    assert_eq!(doc["nodes"][2]["verdict"], "note", "{doc:#}");
    assert_eq!(human_code, Some(0), "{stdout}");
    assert_eq!(
        last_line(&stdout),
        "safe, with notes (3 of 3 nodes safe, quorum 2)",
        "{stdout}"
    );
}

#[tokio::test]
async fn what_an_acl_user_may_not_read_is_unknown() {
    let q = LocalQuorum::start_with(3, NodeOptions::persistent())
        .await
        .unwrap();
    q.node(2)
        .command(&[
            "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info", "-config",
        ])
        .await
        .unwrap();
    let mut urls = q.urls();
    urls[2] = format!("redis://noinfo:pw@127.0.0.1:{}", q.node(2).port());

    let ((code, doc), (human_code, stdout)) = tokio::join!(json(&urls, &[]), human(&urls, &[]));
    assert_eq!(code, Some(2), "{doc:#}");
    assert_eq!(doc["verdict"], "unknown", "{doc:#}");
    let node = &doc["nodes"][2];
    assert_eq!(
        node["node"],
        format!("redis://noinfo:***@127.0.0.1:{}", q.node(2).port())
    );
    assert_eq!(node["reachable"], true, "{node:#}");
    assert_eq!(node["verdict"], "unknown", "{node:#}");
    for field in [
        "version",
        "role",
        "run_id",
        "uptime_s",
        "aof_enabled",
        "appendfsync",
        "maxmemory",
        "maxmemory_policy",
    ] {
        assert_eq!(
            node[field],
            Value::Null,
            "{field} is unknown, not guessed: {node:#}"
        );
    }
    assert_eq!(
        node["refused_commands"],
        Value::Array(Vec::new()),
        "{node:#}"
    );
    let found = findings(&doc, 2);
    assert!(found.iter().all(|f| !f.starts_with("unsafe")), "{found:?}");
    assert!(
        found.iter().any(|f| f.contains("INFO server refused")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.contains("CONFIG GET refused")),
        "{found:?}"
    );
    // The default user's nodes are known in full.
    assert_eq!(doc["nodes"][0]["appendfsync"], "always");

    assert_eq!(human_code, Some(2), "{stdout}");
    let row = row(&stdout, 2);
    // version, role, run_id, uptime, persistence, eviction.
    assert_eq!(row.matches(" unknown ").count(), 6, "{row}");
    assert!(row.ends_with(" unknown"), "{row}");
    assert!(
        last_line(&stdout).starts_with("unknown: node 2 could not be fully checked"),
        "{stdout}"
    );
}

/// The permission check covers what the scripts run (a user that may not `DEL` could take
/// a lock and never release it), and key patterns are checked under the key prefix in use,
/// not under a name of the doctor's own.
#[tokio::test]
async fn commands_and_keys_the_client_needs_are_checked_under_its_prefix() {
    let q = LocalQuorum::start_with(3, NodeOptions::persistent())
        .await
        .unwrap();
    let users: [(usize, &[&str]); 3] = [
        (
            1,
            &[
                "app",
                "on",
                ">pw",
                "~app:*",
                "~quorumlock:node",
                "~quorumlock:hwm",
                "+@all",
            ],
        ),
        (2, &["nodel", "on", ">pw", "~*", "+@all", "-del"]),
        (
            0,
            &[
                "leads",
                "on",
                ">pw",
                "~app:*",
                "~quorumlock:leader:app:*",
                "~quorumlock:node",
                "~quorumlock:hwm",
                "+@all",
            ],
        ),
    ];
    for (i, user) in users {
        let args: Vec<&str> = ["ACL", "SETUSER"].iter().chain(user).copied().collect();
        q.node(i).command(&args).await.unwrap();
    }
    let mut urls = q.urls();
    urls[0] = format!("redis://leads:pw@127.0.0.1:{}", q.node(0).port());
    urls[1] = format!("redis://app:pw@127.0.0.1:{}", q.node(1).port());
    urls[2] = format!("redis://nodel:pw@127.0.0.1:{}", q.node(2).port());
    let under_app = [
        ("QUORUMLOCK_KEY_PREFIX", "app:"),
        ("QUORUMLOCK_FENCING", "false"),
    ];
    let under_other = [
        ("QUORUMLOCK_KEY_PREFIX", "other:"),
        ("QUORUMLOCK_FENCING", "false"),
    ];
    let ((code, doc), (other_code, other), (human_code, stdout)) = tokio::join!(
        json(&urls, &under_app),
        json(&urls, &under_other),
        human(&urls, &under_app)
    );
    assert_eq!(code, Some(1), "{doc:#}");
    assert_eq!(doc["verdict"], "unsafe", "{doc:#}");
    let nodes = &doc["nodes"];
    // Keys under `app:` are all the `app` user needs with that prefix.
    assert_eq!(
        nodes[1]["refused_commands"],
        serde_json::json!([]),
        "{doc:#}"
    );
    // Elections need the identity keys too: a note, since locks do not.
    assert_eq!(nodes[1]["verdict"], "note", "{doc:#}");
    assert_eq!(
        nodes[1]["refused_for_elections"],
        serde_json::json!([
            "GET on quorumlock:leader:app:*",
            "SET on quorumlock:leader:app:*"
        ]),
        "{doc:#}"
    );
    assert!(
        findings(&doc, 1)
            .iter()
            .any(|f| f.starts_with("note: ") && f.contains("leader elections")),
        "{doc:#}"
    );
    // A user that may also touch them is fine for both.
    assert_eq!(nodes[0]["verdict"], "ok", "{doc:#}");
    assert_eq!(
        nodes[0]["refused_for_elections"],
        serde_json::json!([]),
        "{doc:#}"
    );
    assert_eq!(
        nodes[2]["refused_commands"],
        serde_json::json!(["DEL"]),
        "{doc:#}"
    );
    assert_eq!(nodes[2]["verdict"], "unsafe", "{doc:#}");
    let found = findings(&doc, 2);
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("unsafe: ") && f.contains("DEL")),
        "{found:?}"
    );
    // Under another prefix, the `app` user may touch none of the lock keys.
    assert_eq!(other_code, Some(1), "{other:#}");
    let refused = other["nodes"][1]["refused_commands"].as_array().unwrap();
    for needed in [
        "EVALSHA on other:*",
        "GET on other:*",
        "SET on other:*",
        "DEL on other:*",
    ] {
        assert!(refused.iter().any(|r| r == needed), "{needed}: {other:#}");
    }
    assert_eq!(
        other["nodes"][2]["refused_commands"],
        serde_json::json!(["DEL"])
    );

    assert_eq!(human_code, Some(1), "{stdout}");
    assert!(row(&stdout, 2).ends_with(" UNSAFE"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("node 2: unsafe: refuses") && l.contains("DEL")),
        "{stdout}"
    );
}

#[tokio::test]
async fn an_unreachable_node_is_unsafe() {
    let q = LocalQuorum::start_with(2, NodeOptions::persistent())
        .await
        .unwrap();
    // A port nothing listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("redis://127.0.0.1:{}", free.local_addr().unwrap().port());
    drop(free);
    let urls = [q.urls(), vec![down.clone()]].concat();
    // Each inspection waits out the connect timeout (1s), then the node timeout for the
    // PING it sends to the node that never connected (2s here): both at once.
    let ((code, doc), (human_code, stdout)) = tokio::join!(json(&urls, &[]), human(&urls, &[]));
    assert_eq!(code, Some(1), "{doc:#}");
    assert_eq!(doc["verdict"], "unsafe");
    let node = &doc["nodes"][2];
    assert_eq!(node["node"], down);
    assert_eq!(node["reachable"], false, "{node:#}");
    assert_eq!(node["error_kind"], "io", "{node:#}");
    let error = node["error"].as_str().unwrap_or_default();
    assert!(error.contains("connection refused"), "{node:#}");
    assert!(!error.contains("Os {"), "no Debug dump: {node:#}");
    assert_eq!(node["round_trip_ms"], Value::Null, "{node:#}");
    assert_eq!(node["run_id"], Value::Null, "{node:#}");
    assert!(
        findings(&doc, 2)
            .iter()
            .any(|f| f.starts_with("unsafe: unreachable")),
        "{node:#}"
    );

    assert_eq!(human_code, Some(1), "{stdout}");
    let row = row(&stdout, 2);
    assert!(
        row.contains(" unreachable ") && row.ends_with(" UNSAFE"),
        "{row}"
    );
    assert!(stdout.contains("\nnode 2: unsafe: unreachable"), "{stdout}");
    // The two others are still a quorum.
    assert_eq!(
        last_line(&stdout),
        "UNSAFE: node 2 is unsafe (2 of 3 nodes safe, quorum 2)",
        "{stdout}"
    );
}

/// The messages of the findings about the client, each prefixed with its severity.
fn client_findings(doc: &Value) -> Vec<String> {
    messages(&doc["client"]["findings"])
}

/// The client is reported beside the nodes: this binary's decoder bounds nesting (the
/// repository applies the patch), so there is no finding about it, and settings that are
/// fragile are notes (two nodes here, with a ttl long enough for the 2 s node timeout); the
/// verdict stays safe. (`Config::findings_with` is tested with an unbounded decoder.)
#[tokio::test]
async fn the_client_is_reported_beside_the_nodes() {
    let (three, two) = tokio::join!(
        LocalQuorum::start_with(3, NodeOptions::persistent()),
        LocalQuorum::start_with(2, NodeOptions::persistent()),
    );
    let (three, two) = (three.unwrap(), two.unwrap());
    let ttl = [("QUORUMLOCK_TTL", "1m")];
    let (three_urls, two_urls) = (three.urls(), two.urls());
    let ((code, doc), (two_code, two_doc), (human_code, stdout)) = tokio::join!(
        json(&three_urls, &ttl),
        json(&two_urls, &ttl),
        human(&two_urls, &ttl)
    );
    assert_eq!(code, Some(0), "{doc:#}");
    assert_eq!(doc["client"]["decoder_bounded"], true, "{doc:#}");
    assert_eq!(client_findings(&doc), Vec::<String>::new(), "{doc:#}");

    assert_eq!(two_code, Some(0), "{two_doc:#}");
    assert_eq!(two_doc["verdict"], "safe", "{two_doc:#}");
    assert_eq!(two_doc["client"]["decoder_bounded"], true, "{two_doc:#}");
    let two_nodes = "note: 2 nodes: no node may fail (a quorum of 2 is 2), so locks fail \
                     whenever one node is down, frozen or cut off; use 3 or 5 independent masters";
    assert_eq!(client_findings(&two_doc), [two_nodes], "{two_doc:#}");

    assert_eq!(human_code, Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("\nclient: {two_nodes}\n")),
        "{stdout}"
    );
    assert_eq!(
        last_line(&stdout),
        "safe, with notes (2 of 2 nodes safe, quorum 2)",
        "{stdout}"
    );
}

/// Every command's `calls` and `failed_calls` on `node`, from `INFO commandstats`.
async fn commandstats(node: &LocalNode) -> BTreeMap<String, (u64, u64)> {
    let text = info(node, "commandstats").await;
    text.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| l.split_once(':'))
        .map(|(name, stats)| {
            let field = |key: &str| -> u64 {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .map_or(0, |v| v.parse().unwrap())
            };
            (name.to_string(), (field("calls"), field("failed_calls")))
        })
        .collect()
}

async fn info(node: &LocalNode, section: &str) -> String {
    match node.command(&["INFO", section]).await.unwrap() {
        Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("INFO {section}: {other:?}"),
    }
}

/// `field` from `INFO section`.
async fn info_field(node: &LocalNode, section: &str, field: &str) -> String {
    let text = info(node, section).await;
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .trim()
        .to_string()
}

/// Without `QUORUMLOCK_TTL`, the quarantine the doctor reports lasts the library's default
/// ttl (10 s), which is also `quorumlock run`'s: the doctor and the clients agree on a node's
/// state.
#[tokio::test]
async fn the_quarantine_lasts_the_librarys_default_ttl() {
    let q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .unwrap();
    unmark(&q).await;
    let (code, doc) = json(&q.urls(), &[]).await;
    for i in 0..3 {
        let node = &doc["nodes"][i];
        let found = findings(&doc, i);
        assert!(
            found
                .iter()
                .any(|f| f.contains("quarantined for 10s, then re-seeded")),
            "{found:?}"
        );
        // Seconds old, so quarantined still, unless this machine is slow enough for 10 s to
        // have passed since the servers started.
        if let Some(left) = node["quarantined_for_s"].as_f64() {
            assert!(left > 0.0 && left <= 10.0, "{node:#}");
            assert_eq!(code, Some(3), "{doc:#}");
        }
    }
}

#[tokio::test]
async fn doctor_writes_nothing() {
    let q = LocalQuorum::start_with(3, NodeOptions::persistent())
        .await
        .unwrap();
    let mut before = Vec::new();
    for node in q.nodes() {
        before.push((
            commandstats(node).await,
            info_field(node, "persistence", "rdb_changes_since_last_save").await,
        ));
    }
    // Twice: the table and the JSON, at once.
    let urls = q.urls();
    let (table, document) = tokio::join!(human(&urls, &[]), json(&urls, &[]));
    assert_eq!((table.0, document.0), (Some(0), Some(0)), "{table:?}");
    let runs = 2;

    // What a doctor may send: reads, connection set-up, and the permission probes.
    let allowed = [
        "ping",
        "info",
        "time",
        "config|get",
        "client|id",
        "client|setname",
        "client|setinfo",
        "hello",
        "auth",
        "select",
        "set",
        "eval",
        "evalsha",
        "exists",
        "get",
        "mget",
        "del",
        "pexpire",
        // The semaphores' probe (for the report only), on a key that does not exist.
        "type",
        "pttl",
        "zcard",
        "zscore",
        "zrange",
        "zadd",
        "zrem",
        "zremrangebyscore",
        // Whether the node runs DELIFEQ and MSETEX for the client (Valkey 9 and 9.1), on a
        // key that does not exist.
        "delifeq",
        "msetex",
        // Redis 6.2 counts subcommands under their command: there `client` and `config`
        // stand for the ones above (a `CONFIG SET` would pass unseen on 6.2 only; later
        // versions count it as `config|set`, checked below).
        "client",
        "config",
    ];
    // The permission probe runs twice a run: when the client checks each new connection,
    // and for the report.
    let probes = 2 * runs;
    for (i, (node, (stats, dirty))) in q.nodes().iter().zip(before).enumerate() {
        let after = commandstats(node).await;
        for (name, counts) in &after {
            if stats.get(name) != Some(counts) {
                assert!(
                    allowed.contains(&name.as_str()),
                    "node {i} ran {name}: {after:?}"
                );
            }
        }
        let delta = |name: &str| {
            let (calls, failed) = after.get(name).copied().unwrap_or_default();
            let (calls0, failed0) = stats.get(name).copied().unwrap_or_default();
            (calls - calls0, failed - failed0)
        };
        // Only the probes, on a lock key and a fencing counter that do not exist: `SET ... XX`
        // (sets nothing), `DEL` and `PEXPIRE` (of nothing), a script that does not compile, a
        // SHA cached nowhere; for the report only, a `GET` and a `SET ... XX` of a leader
        // identity key that does not exist; and the `GET`s of the node's marker and of the
        // record of its quarantine when the connection is checked.
        assert_eq!(delta("set").0, 2 * probes + runs, "node {i}");
        assert_eq!(delta("get").0, 2 * probes + 3 * runs, "node {i}");
        for no_op in ["exists", "del", "pexpire", "mget"] {
            assert_eq!(delta(no_op), (probes, 0), "node {i}: {no_op}");
        }
        // DELIFEQ, where the server has it (Valkey 9): deletes nothing.
        let delifeq = if common::has_command(node, "DELIFEQ").await {
            probes
        } else {
            0
        };
        assert_eq!(delta("delifeq"), (delifeq, 0), "node {i}: delifeq");
        // MSETEX ... XX, where the server has it (Valkey 9.1): sets nothing.
        let msetex = if common::has_command(node, "MSETEX").await {
            probes
        } else {
            0
        };
        assert_eq!(delta("msetex"), (msetex, 0), "node {i}: msetex");
        // The semaphores' probe: `ZADD XX` (adds nothing), `ZREM` and `ZREMRANGEBYSCORE`
        // (of nothing), reads of a key that does not exist.
        for no_op in [
            "type",
            "zscore",
            "zrange",
            "zadd",
            "zrem",
            "zremrangebyscore",
        ] {
            assert_eq!(delta(no_op), (runs, 0), "node {i}: {no_op}");
        }
        assert_eq!(
            delta("eval"),
            (probes, probes),
            "node {i}: EVAL failed, ran nothing"
        );
        assert_eq!(
            delta("evalsha"),
            (probes, probes),
            "node {i}: EVALSHA failed, ran nothing"
        );
        for write in ["unlink", "incr", "script|load", "config|set"] {
            assert_eq!(delta(write), (0, 0), "node {i}: {write}");
        }
        // And nothing changed: no key but the marker the testkit wrote at the start, no
        // cached script, no dirty write.
        let dbsize = node.command(&["DBSIZE"]).await.unwrap();
        assert_eq!(dbsize, Reply::Integer(1), "node {i}");
        let scripts = info_field(node, "memory", "number_of_cached_scripts").await;
        assert_eq!(scripts, "0", "node {i}: a script was cached");
        let dirty_after = info_field(node, "persistence", "rdb_changes_since_last_save").await;
        assert_eq!(dirty_after, dirty, "node {i}: a write changed the dataset");
    }
}

#[tokio::test]
async fn exits_64_with_one_line_on_bad_input() {
    let down = nowhere();
    // Arguments after `doctor`.
    #[rustfmt::skip]
    let cases: &[BadInput] = &[
        (&["--window", "0s"], &[], "greater than zero"),
        (&["--window", "soon"], &[], "--window"),
        (&["--nodes", ""], &[], "no nodes"),
        (&["--nodes", "not a url"], &[], "invalid node URL"),
        (&["--nodes", "http://127.0.0.1"], &[], "scheme"),
        (
            &["--nodes", "127.0.0.1:7701"], &[],
            "`127.0.0.1:7701` has no scheme: write `redis://127.0.0.1:7701`",
        ),
        (&["--nodes", "redis://a,redis://a:6379"], &[], "same server"),
        (&["--frobnicate"], &[], "--frobnicate"),
        (&["extra"], &[], "unexpected argument 'extra'"),
        (&[], &[("QUORUMLOCK_TTL", "soon")], "QUORUMLOCK_TTL"),
        (&[], &[("QUORUMLOCK_DRIFT_FACTOR", "2")], "drift"),
        // 2 s against the 23 ms of validity of a 50 ms lock (drift factor 0.5).
        (
            &[], &[("QUORUMLOCK_TTL", "50ms")],
            "the node timeout (2s) is not shorter than the validity of the longest lock (23ms",
        ),
        (&[], &[("QUORUMLOCK_QUARANTINE", "maybe")], "QUORUMLOCK_QUARANTINE"),
        (&[], &[("QUORUMLOCK_LOG", "loud")], "QUORUMLOCK_LOG"),
    ];
    for case @ (args, env, _) in cases {
        let mut cli = doctor(&down, args);
        cli.envs(env.iter().copied());
        let out = outcome(&mut cli).await;
        assert_bad_input(case, &out);
        assert_eq!(out.stdout, "", "{args:?} {env:?}: {out:?}");
    }
    // No nodes anywhere.
    let out = outcome(&mut doctor(&[], &[])).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.starts_with("quorumlock: no nodes"), "{out:?}");

    // The long help documents the exit codes.
    for args in [&["help", "doctor"][..], &["doctor", "--help"]] {
        let mut cli = Command::new(BIN);
        let out = outcome(cli.args(args)).await;
        assert_eq!(out.code, Some(0), "{args:?}: {out:?}");
        for expected in [
            "Exit status:",
            "0   every node is safe",
            "1   something is unsafe",
            "2   nothing is unsafe, but something could not be checked",
            "64  usage or configuration error",
            "--window <DURATION>",
            "--json",
        ] {
            assert!(
                out.stdout.contains(expected),
                "{args:?}: {expected}:\n{}",
                out.stdout
            );
        }
    }
}

/// Each node's release path and the server it names are reported, whatever the server: the
/// script everywhere, and the Lua-free compare-and-delete the server really has (asked here
/// with `COMMAND INFO`; scripts/compat runs this against Redis 6.2 to Valkey 9).
#[tokio::test]
async fn each_node_says_how_it_releases_and_what_the_server_offers() {
    let q = LocalQuorum::start(3).await.unwrap();
    let node = q.node(0);
    let delifeq = common::has_command(node, "DELIFEQ").await;
    let delex = common::has_command(node, "DELEX").await;
    let offered = match (delifeq, delex) {
        (true, _) => Value::from("delifeq"),
        (false, true) => Value::from("delex"),
        (false, false) => Value::Null,
    };
    let info = match node.command(&["INFO", "server"]).await.unwrap() {
        Reply::Bulk(Some(text)) => String::from_utf8(text).unwrap(),
        other => panic!("INFO gave {other:?}"),
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
    };
    let server = match field("server_name") {
        Some(name) => format!("{name} {}", field(&format!("{name}_version")).unwrap()),
        None => format!("redis {}", field("redis_version").unwrap()),
    };

    let urls = q.urls();
    let ((_, doc), (_, stdout)) = tokio::join!(json(&urls, &[]), human(&urls, &[]));
    for i in 0..3 {
        let node = &doc["nodes"][i];
        assert_eq!(node["release_path"], "script", "{node:#}");
        assert_eq!(node["compare_and_delete"], offered, "{node:#}");
        assert_eq!(node["server"], server.as_str(), "{node:#}");
        let row = row(&stdout, i);
        let release = match offered.as_str() {
            Some(other) => format!("script (has {other})"),
            None => "script".to_string(),
        };
        assert!(
            row.contains(&format!("  {release}  ")),
            "{release}: {stdout}"
        );
        assert!(row.contains(&server), "{server}: {stdout}");
    }
}

/// The quarantine the doctor reports is the one kept on the nodes (design 2.6a): a second
/// run, a moment later, counts down from where the first left off rather than starting a
/// quarantine of its own, and both read the same record on every node.
#[tokio::test]
async fn the_quarantine_counts_down_across_runs() {
    let q = LocalQuorum::start_with(3, NodeOptions::volatile())
        .await
        .unwrap();
    unmark(&q).await;
    // Longer than the whole test: the quarantine is still on at the second run.
    let ttl = [("QUORUMLOCK_TTL", "10m")];
    let left = |doc: &Value, i: usize| doc["nodes"][i]["quarantined_for_s"].as_f64();
    let (code, first) = json(&q.urls(), &ttl).await;
    assert_eq!(code, Some(3), "{first:#}");
    let mut records = Vec::new();
    for node in q.nodes() {
        records.push(common::get(node, "quorumlock:quarantine").await);
    }
    let (code, second) = json(&q.urls(), &ttl).await;
    assert_eq!(code, Some(3), "{second:#}");
    for (i, node) in q.nodes().iter().enumerate() {
        let record = common::get(node, "quorumlock:quarantine").await;
        assert!(record.is_some(), "node {i} keeps its quarantine");
        assert_eq!(record, records[i], "node {i}'s quarantine started again");
        let (first, second) = (left(&first, i).unwrap(), left(&second, i).unwrap());
        assert!(second < first, "node {i}: {first} s, then {second} s");
    }
}
