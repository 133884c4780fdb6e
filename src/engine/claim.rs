//! What an acquisition claims: the resources and their keys ([`Resources`]).

use crate::engine::held::Keys;

/// What one acquisition claims: the resources' names and their keys.
#[derive(Debug, Clone)]
pub(crate) struct Resources {
    /// The resources' names joined by commas, for messages.
    pub(crate) name: String,
    pub(crate) resources: Vec<String>,
    pub(crate) keys: Keys,
}
