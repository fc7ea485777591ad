//! Who may connect to the subsystem, and what each host must prove: the
//! allow-list (nvmet's `allowed_hosts` and `attr_allow_any_host`, SPDK's
//! `nvmf_subsystem_add_host` and `allow_any_host`) and each listed host's
//! DH-HMAC-CHAP secrets (nvmet's `dhchap_key` and `dhchap_ctrl_key`).

use crate::auth::{DhGroup, Hash, Secret};
use std::collections::BTreeMap;

/// The subsystem's hosts.
#[derive(Debug, Clone)]
pub struct Access {
    /// Any HOSTNQN may connect; a listed host still authenticates if it
    /// has a secret.
    pub allow_any_host: bool,
    /// Hosts by HOSTNQN.
    pub hosts: BTreeMap<String, HostKeys>,
    /// Hash functions the controller accepts, in its order of preference.
    pub hashes: Vec<Hash>,
    /// Diffie-Hellman groups the controller accepts, in its order of
    /// preference.
    pub dhgroups: Vec<DhGroup>,
}

/// What a listed host must prove.
#[derive(Debug, Clone, Default)]
pub struct HostKeys {
    /// The host's secret: with one, the host must authenticate.
    pub key: Option<Secret>,
    /// The controller's secret, with which it answers a host that asks
    /// the controller to authenticate too (bidirectional).
    pub ctrl_key: Option<Secret>,
}

impl Access {
    /// Any host, none authenticating: the embedded demo and the tests.
    pub fn any_host() -> Self {
        Self { allow_any_host: true, ..Self::no_host() }
    }

    /// No host, until some are added: what nvmet and SPDK start with.
    pub fn no_host() -> Self {
        Self {
            allow_any_host: false,
            hosts: BTreeMap::new(),
            // nvmet's defaults first: SHA-256, and the NULL group.
            hashes: vec![Hash::Sha256, Hash::Sha384, Hash::Sha512],
            dhgroups: DhGroup::ALL.to_vec(),
        }
    }

    /// Whether `hostnqn` may connect.
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.contains_key(hostnqn)
    }

    /// The secrets `hostnqn` authenticates with, if it must.
    pub fn keys(&self, hostnqn: &str) -> Option<&HostKeys> {
        self.hosts.get(hostnqn).filter(|k| k.key.is_some())
    }
}

impl Default for Access {
    fn default() -> Self {
        Self::any_host()
    }
}
