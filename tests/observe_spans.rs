//! Each lock attempt and each extension is a tracing span that says how it went, node by node.

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::testkit::LocalQuorum;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

type Fields = BTreeMap<String, String>;

/// Keeps each closed span's name and fields.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<(String, Fields)>>>);

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collect {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Visitor(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(&mut Visitor(fields));
            }
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<Fields>()
                .cloned()
                .unwrap_or_default();
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_string(), fields));
        }
    }
}

#[tokio::test]
async fn attempts_and_extensions_are_spans_with_their_outcome() {
    let collect = Collect::default();
    let subscriber = tracing_subscriber::registry().with(collect.clone());
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let q = LocalQuorum::start(3).await.unwrap();
    let redlock = common::client(&q).await;
    let mut lock = redlock.try_lock("traced").await.unwrap();
    assert!(redlock.try_lock("traced").await.is_err());
    lock.extend_for(Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();

    let spans = collect.0.lock().unwrap().clone();
    let attempts: Vec<&Fields> = spans
        .iter()
        .filter(|(name, f)| name == "quorumlock.attempt" && f["resource"] == "traced")
        .map(|(_, f)| f)
        .collect();
    assert_eq!(attempts.len(), 2, "{spans:?}");
    assert_eq!(attempts[0]["outcome"], "acquired");
    assert!(attempts[0]["yes"].parse::<usize>().unwrap() >= 2);
    assert_eq!(attempts[1]["outcome"], "taken");
    let extension = spans
        .iter()
        .find(|(name, _)| name == "quorumlock.extension")
        .map(|(_, f)| f)
        .expect("an extension span");
    assert_eq!(extension["resource"], "traced");
    assert!(
        extension["yes"].parse::<usize>().unwrap() >= 2,
        "{extension:?}"
    );
}
