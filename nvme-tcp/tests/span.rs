//! Tracing, alone in its process: a test subscriber set for one thread
//! sees every callsite only if no other test thread has met it first
//! without one (callsite interest is cached process-wide).

use nvme_of::controller::{Target, TargetConfig};
use nvme_of::host::{HostConfig, IoKind};
use nvme_of::nvme::Status;
use nvme_of::pair::{self, Pair, SUBNQN};
use nvme_storage::RamNamespace;
use std::sync::Arc;
use ulp_ddp::IoBuf;

fn nvm() -> Pair {
    let target: Arc<Target> =
        pair::target(TargetConfig::default(), Arc::new(RamNamespace::new(16 << 20, 512).unwrap()));
    let host = HostConfig { subnqn: SUBNQN.into(), ..HostConfig::default() };
    Pair::new(nvme_tcp::host::new(host), Arc::new(nvme_tcp::controller::Tcp), target)
}

/// A controller connection's span names its queue once, when Connect
/// does: a span's fields are appended each time they are recorded, and
/// the log showed `qid=1` once per command it had served.
#[test]
fn a_connections_span_names_its_queue_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    struct Records(Arc<AtomicUsize>);
    impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Records {
        fn on_record(
            &self,
            id: &tracing::span::Id,
            _: &tracing::span::Record<'_>,
            cx: Context<'_, S>,
        ) {
            if cx.span(id).is_some_and(|s| s.name() == "ctrl_conn") {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let records = Arc::new(AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry().with(Records(records.clone()));
    tracing::subscriber::with_default(subscriber, || {
        let mut p = nvm();
        p.ready();
        for lba in 0..20 {
            let buf = IoBuf::new(512);
            assert_eq!(p.io(1, IoKind::Read, lba, 1, Some(buf)), Status::SUCCESS);
        }
    });
    // The admin queue's connection and the I/O queue's.
    assert_eq!(records.load(Ordering::Relaxed), 2);
}
