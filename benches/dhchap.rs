//! What DH-HMAC-CHAP costs a connection: one whole transaction (host and
//! controller, both ways) per queue, by Diffie-Hellman group. It is paid
//! at connect time only, on every queue, and again at each reconnect;
//! I/O pays nothing for it.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use nvme_of::auth::{CtrlAuth, DhGroup, Hash, HostAuth, Peer, Secret};
use nvme_of::host::DhchapSecrets;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:bench";
const SUBNQN: &str = "nqn.2026-11.io.nvme-ddp:target";

fn transaction(c: &mut Criterion) {
    let mut g = c.benchmark_group("dhchap_transaction");
    g.sample_size(10);
    let key = Secret::generate(32, Some(Hash::Sha256)).unwrap();
    let ctrl_key = Secret::generate(32, Some(Hash::Sha256)).unwrap();
    for group in DhGroup::ALL {
        let (hashes, groups) = ([Hash::Sha256], [group]);
        let peer = Peer {
            hostnqn: HOSTNQN,
            subnqn: SUBNQN,
            key: &key,
            ctrl_key: Some(&ctrl_key),
            hashes: &hashes,
            dhgroups: &groups,
        };
        g.bench_function(BenchmarkId::new("bidirectional", group.name()), |b| {
            b.iter(|| {
                let secrets = DhchapSecrets { key: key.clone(), ctrl_key: Some(ctrl_key.clone()) };
                let (mut host, negotiate) = HostAuth::start(0, HOSTNQN, SUBNQN, secrets);
                let mut ctrl = CtrlAuth::default();
                ctrl.send(&negotiate, &peer);
                let reply = host.challenge(&ctrl.receive(&peer)).unwrap();
                ctrl.send(&reply, &peer);
                let success2 = host.success1(&ctrl.receive(&peer)).unwrap().unwrap();
                ctrl.send(&success2, &peer);
                assert!(ctrl.authenticated());
            })
        });
    }
    g.finish();
}

criterion_group!(benches, transaction);
criterion_main!(benches);
