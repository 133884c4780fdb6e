//! The operator's verbs: `quorumlock ls` lists the locks held without taking any,
//! `quorumlock release --force` breaks the lock of a holder that is gone, and all three with
//! `quorumlock status` name a holder alike; `status` says what `run` would meet where no
//! quorum counts.

mod common;

use std::time::Duration;

use common::cli::{binary, outcome, quorumlock, Outcome};
use common::primitives::sha1_short;
use common::{client, get, holders};
use quorumlock::testkit::LocalQuorum;
use quorumlock::{KeepAlive, RedLock, Retry};

#[tokio::test]
async fn ls_lists_the_held_locks_with_their_holders_and_fencing_tokens() {
    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = client(&q).await;
    let invoice = redlock.lock("invoice:42").await.unwrap();
    let token = invoice.fencing_token().await.unwrap();
    // A client that never asked for a token: its locks record none (the first one's
    // acquisitions would record the token they expect, design 2.6).
    let other = client(&q).await;
    let report = other.lock("report").await.unwrap();
    // Released: its fencing counter stays on the nodes, and is not a lock.
    redlock.lock("done").await.unwrap().release().await.unwrap();
    assert!(redlock.settle(Duration::from_secs(5)).await);

    let out = outcome(quorumlock(&q.urls()).arg("ls")).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    assert!(
        lines[0].starts_with(&format!(
            "invoice:42  holder {}  fencing {token}  ttl ",
            sha1_short(invoice.token().as_str())
        )),
        "{out:?}"
    );
    assert!(lines[0].ends_with("on 3 of 3 nodes"), "{out:?}");
    assert!(
        lines[1].starts_with(&format!(
            "report  holder {}  fencing -  ttl ",
            sha1_short(report.token().as_str())
        )),
        "{out:?}"
    );
    assert_eq!(
        lines[2],
        "2 locks on the 3 of 3 nodes that answered (quorum 2)"
    );
    assert!(
        !out.stdout.contains(invoice.token().as_str()),
        "the token stays secret"
    );

    // A prefix; and the JSON document.
    let out = outcome(quorumlock(&q.urls()).args(["ls", "--json", "inv"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let locks = doc["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 1, "{doc}");
    assert_eq!(locks[0]["resource"], "invoice:42");
    assert_eq!(locks[0]["fencing_token"], token);
    assert_eq!(locks[0]["agreeing"], 3);
    assert_eq!(locks[0]["tokens"][0]["nodes"], serde_json::json!([0, 1, 2]));
    assert_eq!(doc["answered"], 3);
    invoice.release().await.unwrap();
    report.release().await.unwrap();
}

#[tokio::test]
async fn release_force_breaks_an_abandoned_lock_and_wakes_its_waiters() {
    let q = LocalQuorum::start(3).await.unwrap();
    let holder = client(&q).await;
    let lock = holder.lock("nightly").await.unwrap();
    let token = lock.token().as_str().to_string();
    // Granted at the quorum: the last node's SET lands in the background.
    assert!(holder.settle(Duration::from_secs(5)).await);
    // The holder is gone without releasing (its keys would live for the whole ttl).
    std::mem::forget(lock);
    drop(holder);

    // Without --force: a usage error, nothing deleted.
    let out = outcome(quorumlock(&q.urls()).args(["release", "nightly"])).await;
    assert_eq!(out.code, Some(64), "{out:?}");
    assert_eq!(holders(&q, "nightly").await, 3);

    // Another client waits in line for it. Its pauses are far longer than the test, so only
    // the release can get it in: with short ones, a pause that ended just after the break
    // and before the release message came got the lock unwoken (seen once in a full run).
    let waiter = client(&q).await;
    let retry = Retry::within(common::NEVER * 10)
        .delay(common::NEVER)
        .jitter(Duration::ZERO);
    let watched = waiter.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .lock_with("nightly", Duration::from_secs(10), retry)
            .await
            .map(|lock| (lock, waiter))
    });
    // Armed and waiting before the break (its second refused attempt, after it subscribed,
    // puts it in its wait): the release wakes it.
    common::armed(&q, "nightly").await;
    common::eventually("the waiter waits", || async { watched.stats().taken >= 2 }).await;
    let out =
        outcome(quorumlock(&q.urls()).args(["release", "--force", "--watch", "200ms", "nightly"]))
            .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with(&format!(
            "`nightly` is held by {} on nodes [0, 1, 2]",
            sha1_short(&token)
        )),
        "{out:?}"
    );
    assert!(
        out.stdout
            .contains(&format!("released {} on ", sha1_short(&token))),
        "{out:?}"
    );
    let (lock, waiter) = common::within("the waiter's wake-up", waiting)
        .await
        .unwrap()
        .expect("the waiter got the lock");
    assert_ne!(lock.token().as_str(), token);
    assert!(
        waiter.stats().woken >= 1,
        "woken by the release: {:?}",
        waiter.stats()
    );
    lock.release().await.unwrap();
}

#[tokio::test]
async fn release_force_refuses_a_lock_kept_alive_unless_told_twice() {
    let q = LocalQuorum::start(3).await.unwrap();
    let holder: RedLock = client(&q).await;
    let kept = holder
        .lock_with("kept", Duration::from_secs(1), Retry::none())
        .await
        .unwrap()
        .keep_alive(KeepAlive::new())
        .unwrap();
    // Granted at the quorum: the last node's SET lands in the background (node 0 is read
    // below).
    assert!(holder.settle(Duration::from_secs(10)).await);
    // Watched for longer than the keeper's pause between extensions (half the ttl).
    let out =
        outcome(quorumlock(&q.urls()).args(["release", "--force", "--watch", "1500ms", "kept"]))
            .await;
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stdout.contains("a holder keeps it alive"), "{out:?}");
    assert!(kept.is_held());
    assert_eq!(
        get(q.node(0), "kept").await.as_deref(),
        Some(kept.handle().token().as_str())
    );

    let out = outcome(
        quorumlock(&q.urls()).args(["release", "-ff", "--watch", "1500ms", "--json", "kept"]),
    )
    .await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["kept_alive"], true, "{doc}");
    assert_eq!(
        doc["released"][0]["error"],
        serde_json::Value::Null,
        "{doc}"
    );
    // The keeper finds its keys gone.
    let reason = tokio::time::timeout(Duration::from_secs(10), kept.handle().lost())
        .await
        .expect("the loss is signalled");
    assert_eq!(kept.handle().lost_reason(), Some(reason));
}

/// One holder id everywhere: `status`, `ls` and `release --force`, in their text and their
/// JSON, name a holder by the first 12 hex digits of the SHA1 of its token, and none prints
/// the token (whoever has it can release the lock).
#[tokio::test]
async fn status_ls_and_release_name_a_holder_alike_and_never_by_its_token() {
    let q = LocalQuorum::start(3).await.unwrap();
    let holder = client(&q).await;
    let mut tokens = Vec::new();
    for resource in ["nightly", "weekly"] {
        let lock = holder.lock(resource).await.unwrap();
        tokens.push(lock.token().as_str().to_string());
        // Gone without releasing.
        std::mem::forget(lock);
    }
    // Granted at the quorum: the last node's SETs land in the background (a node read
    // before its SET would not name the holder).
    assert!(holder.settle(Duration::from_secs(10)).await);
    drop(holder);
    let (nightly, weekly) = (sha1_short(&tokens[0]), sha1_short(&tokens[1]));
    let run = |args: &[&str]| {
        let mut c = quorumlock(&q.urls());
        c.args(args);
        c
    };
    let json = |out: &Outcome| -> serde_json::Value {
        serde_json::from_str(&out.stdout).expect("one JSON document")
    };
    let mut outs = Vec::new();

    let out = outcome(&mut run(&["status", "nightly"])).await;
    assert_eq!(out.code, Some(75), "{out:?}");
    let by = format!("held by {nightly} (");
    assert_eq!(out.stdout.matches(&by).count(), 4, "{out:?}");
    outs.push(out);
    let out = outcome(&mut run(&["status", "--json", "nightly"])).await;
    let doc = json(&out);
    assert_eq!(doc["holder_sha1"], nightly.as_str(), "{doc:#}");
    for node in doc["nodes"].as_array().expect("nodes") {
        assert_eq!(node["holder_sha1"], nightly.as_str(), "{doc:#}");
    }
    outs.push(out);

    let out = outcome(&mut run(&["ls"])).await;
    assert!(
        out.stdout
            .contains(&format!("nightly  holder {nightly}  fencing")),
        "{out:?}"
    );
    outs.push(out);
    let out = outcome(&mut run(&["ls", "--json"])).await;
    let doc = json(&out);
    assert_eq!(doc["locks"][0]["holder_sha1"], nightly.as_str(), "{doc:#}");
    assert_eq!(
        doc["locks"][0]["tokens"][0]["sha1"],
        nightly.as_str(),
        "{doc:#}"
    );
    outs.push(out);

    let out = outcome(&mut run(&["release", "-f", "--watch", "100ms", "nightly"])).await;
    assert_eq!(out.code, Some(0), "{out:?}");
    let said = format!("`nightly` is held by {nightly} on nodes [0, 1, 2]");
    assert!(out.stdout.starts_with(&said), "{out:?}");
    outs.push(out);
    let out = outcome(&mut run(&[
        "release", "-f", "--watch", "100ms", "--json", "weekly",
    ]))
    .await;
    let doc = json(&out);
    assert_eq!(doc["tokens"][0]["sha1"], weekly.as_str(), "{doc:#}");
    assert_eq!(doc["released"][0]["sha1"], weekly.as_str(), "{doc:#}");
    outs.push(out);

    for out in &outs {
        for token in &tokens {
            let secret = &token[..8];
            assert!(
                !out.stdout.contains(secret) && !out.stderr.contains(secret),
                "the token stays secret: {out:?}"
            );
        }
    }
}

/// The summary line of `status`'s text.
fn summary(out: &Outcome) -> &str {
    out.stdout.lines().last().unwrap_or_default()
}

/// During the nodes' quarantine (new servers flushed: none holds its marker), `status` says
/// what `run -n` meets instead of `free`: the quarantine, when it ends, and exit 69, in text
/// and in JSON. Once it has ended, `free`, and `run -n` locks.
#[tokio::test]
async fn status_tells_a_quarantine_as_run_meets_it() {
    let q = LocalQuorum::start(3).await.unwrap();
    for node in q.nodes() {
        node.command(&["FLUSHALL"]).await.expect("FLUSHALL");
    }
    // Quarantine on (the default), for the longest ttl: 2 s.
    let cli = |args: &[&str]| {
        let mut c = binary(&q.urls());
        c.env("QUORUMLOCK_TTL", "2s")
            .env("QUORUMLOCK_NODE_TIMEOUT", "500ms")
            .args(args);
        c
    };
    let out = outcome(&mut cli(&["status", "job"])).await;
    assert_eq!(out.code, Some(69), "{out:?}");
    let line = summary(&out);
    assert!(
        line.starts_with(
            "`job`: quarantined: the nodes' quarantine keeps them from a quorum and ends in "
        ) && line.ends_with(": `run -n` exits 69 until then (key on 0 of 3 nodes, quorum 2)"),
        "{out:?}"
    );
    assert_eq!(out.stdout.matches(": free\n").count(), 3, "{out:?}");
    let run = outcome(&mut cli(&["run", "-n", "job", "--", "true"])).await;
    assert_eq!(run.code, out.code, "{run:?}");

    let out = outcome(&mut cli(&["status", "--json", "job"])).await;
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    assert_eq!(doc["verdict"], "quarantined", "{doc:#}");
    assert_eq!(doc["exit_code"], 69, "{doc:#}");
    let left = doc["quorum_in_s"].as_f64().expect("seconds left");
    assert!(left > 0.0 && left <= 3.0, "{doc:#}");

    tokio::time::sleep(Duration::from_secs_f64(left)).await;
    common::eventually("status says free", || async {
        outcome(&mut cli(&["status", "job"])).await.code == Some(0)
    })
    .await;
    let out = outcome(&mut cli(&["status", "job"])).await;
    assert_eq!(summary(&out), "`job`: free (key on 0 of 3 nodes, quorum 2)");
    let run = outcome(&mut cli(&["run", "-n", "job", "--", "true"])).await;
    assert_eq!(run.code, Some(0), "{run:?}");
}

/// Where too few nodes count (two of three are replicas: their keys answer, their votes never
/// count), `status` says `no quorum` and exits 69, as `run -n` does, instead of `free`.
#[tokio::test]
async fn status_tells_no_quorum_where_too_few_nodes_count() {
    let q = LocalQuorum::start(3).await.unwrap();
    let primary = q.node(0).port().to_string();
    for i in [1, 2] {
        let ok = q
            .node(i)
            .command(&["REPLICAOF", "127.0.0.1", &primary])
            .await;
        assert_eq!(ok.expect("REPLICAOF").as_str(), Some("OK"));
    }
    let run = |args: &[&str]| {
        let mut c = quorumlock(&q.urls());
        c.args(args);
        c
    };
    let out = outcome(&mut run(&["status", "job"])).await;
    assert_eq!(out.code, Some(69), "{out:?}");
    assert_eq!(out.stdout.matches(": free\n").count(), 3, "{out:?}");
    assert!(
        summary(&out).starts_with("`job`: no quorum: fewer than 2 of 3 nodes count ("),
        "{out:?}"
    );
    let doc = outcome(&mut run(&["status", "--json", "job"])).await;
    let doc: serde_json::Value = serde_json::from_str(&doc.stdout).expect("one JSON document");
    assert_eq!(doc["verdict"], "no_quorum", "{doc:#}");
    assert_eq!(doc["quorum_in_s"], serde_json::Value::Null, "{doc:#}");
    let locked = outcome(&mut run(&["run", "-n", "job", "--", "true"])).await;
    assert_eq!(locked.code, out.code, "{locked:?}");
}
