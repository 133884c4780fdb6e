//! Leader election on three local `redis-server` masters: three candidates campaign for the
//! election `scheduler`; each leader works for a few rounds (stopping at once if it is told
//! that its leadership is lost) and resigns, and the next one takes over at once, in a higher
//! term; an observer prints each change of leader.
//!
//! ```text
//! cargo run --example election --features testkit
//! ```

use std::time::Duration;

use futures::StreamExt;
use quorumlock::testkit::LocalQuorum;
use quorumlock::{Candidacy, RedLock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quorum = LocalQuorum::start(3).await?;
    let client = || -> Result<RedLock, quorumlock::ConfigError> {
        RedLock::builder()
            .nodes(quorum.urls())
            .ttl(Duration::from_secs(2))
            .build()
    };

    let observer = client()?;
    tokio::spawn(async move {
        let changes = observer.observe("scheduler", Duration::from_millis(100));
        futures::pin_mut!(changes);
        while let Some(seen) = changes.next().await {
            match seen {
                Ok(Some(leader)) => println!("observer: {leader} leads"),
                Ok(None) => println!("observer: nobody leads"),
                Err(e) => println!("observer: cannot tell: {e}"),
            }
        }
    });

    let mut candidates = Vec::new();
    for name in ["a", "b", "c"] {
        let redlock = client()?;
        redlock.wait_for_quorum(Duration::from_secs(5)).await;
        candidates.push(tokio::spawn(async move {
            let candidacy = Candidacy::new().identity(format!("candidate-{name}"));
            let leadership = redlock.campaign_with("scheduler", candidacy).await?;
            let term = leadership.term();
            println!("{name}: leading in term {term}");
            // The work: a few rounds of scheduling, each tagged with the term.
            let mut lost = false;
            for round in 0..3 {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(300)) => {
                        println!("{name}: round {round} of term {term}");
                    }
                    reason = leadership.lost() => {
                        println!("{name}: lost the leadership: {reason}");
                        lost = true;
                        break;
                    }
                }
            }
            if lost {
                drop(leadership);
            } else {
                leadership.resign().await?;
                println!("{name}: resigned");
            }
            // This candidate is done: whatever its client still holds is released now.
            redlock.shutdown().await;
            Ok::<_, quorumlock::Error>(name)
        }));
    }
    for candidate in candidates {
        candidate.await??;
    }
    Ok(())
}
