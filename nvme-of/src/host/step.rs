//! What each admin command the host sends is for: the step of bring-up,
//! discovery, shutdown or DH-HMAC-CHAP that its completion moves on.

/// Steps of bring-up, discovery and shutdown, each one admin command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Connect,
    GetCap,
    WriteCc,
    EnableCc,
    PollReady,
    GetVs,
    IdentifyController,
    SetQueues,
    ConnectIo,
    NsList,
    IdentifyNs(u32),
    DiscoveryHeader,
    DiscoveryEntries,
    Shutdown,
    PollShutdown,
    /// CC.EN cleared for a reset the host asked for.
    Disable,
    /// DH-HMAC-CHAP on the queue the step's command went to.
    Auth(AuthStep),
}

impl Step {
    pub(super) fn name(self) -> &'static str {
        match self {
            Step::Connect => "Connect",
            Step::GetCap => "Property Get CAP",
            Step::WriteCc | Step::EnableCc => "Property Set CC",
            Step::PollReady | Step::PollShutdown => "Property Get CSTS",
            Step::GetVs => "Property Get VS",
            Step::IdentifyController => "Identify Controller",
            Step::SetQueues => "Set Features (Number of Queues)",
            Step::ConnectIo => "Connect (I/O queue)",
            Step::NsList => "Identify Active Namespace List",
            Step::IdentifyNs(_) => "Identify Namespace",
            Step::DiscoveryHeader | Step::DiscoveryEntries => "Get Log Page (Discovery)",
            Step::Shutdown => "Property Set CC.SHN",
            Step::Disable => "Property Set CC.EN=0",
            Step::Auth(AuthStep::Negotiate) => "Authentication Send (Negotiate)",
            Step::Auth(AuthStep::Challenge) => "Authentication Receive (Challenge)",
            Step::Auth(AuthStep::Reply) => "Authentication Send (Reply)",
            Step::Auth(AuthStep::Success1) => "Authentication Receive (Success1)",
            Step::Auth(AuthStep::Success2) => "Authentication Send (Success2)",
            Step::Auth(AuthStep::Failure2) => "Authentication Send (Failure2)",
        }
    }
}

/// The steps of one queue's transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthStep {
    Negotiate,
    Challenge,
    Reply,
    Success1,
    Success2,
    /// Failure2 sent: the transaction failed, whatever its completion says.
    Failure2,
}
