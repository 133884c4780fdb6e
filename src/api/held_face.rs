//! What [`Lock`](crate::Lock), [`Permit`](crate::Permit) and [`RwGuard`](crate::RwGuard)
//! have alike: each is an `engine::held::Held` (field `.0`), and its token, validity,
//! extension, release and keep-alive only pass on to it. [`held_face!`] writes those calls
//! once; each type invokes it in its `impl` block with the calls it has, in the order its
//! docs list them.
//!
//! A call listed bare gets docs written here from the type's noun ("lock", "permit", "side");
//! a call listed with doc comments gets those instead, for what differs by type (a permit's
//! fencing token names its slot, a lock's docs are the ones the others refer to). A call
//! whose meaning always differs by type (`fencing_token`) has no default: listing it bare
//! does not compile.

/// Expands, inside the `impl` block of a tuple struct over `Held`, to the listed calls (see
/// the module, and `Permit`'s block for a call listed with its own docs).
macro_rules! held_face {
    // The blocking twins' calls that do not wait (`api/blocking/`), over field `inner`.
    (inner $noun:literal; $($call:ident),+ $(,)?) => {
        $( $crate::api::held_face::held_face!(@call $call, inner, $noun, []); )+
    };
    ($noun:literal; $( $(#[$doc:meta])* $call:ident; )+) => {
        $( $crate::api::held_face::held_face!(@call $call, 0, $noun, [$(#[$doc])*]); )+
    };

    (@call token, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            /// This acquisition's unguessable token, as stored on the nodes.
        ]
        pub fn token(&self) -> &$crate::engine::held::Token {
            self.$f.token()
        });
    };
    (@call fencing_token, $f:tt, $noun:literal, [$($docs:tt)+]) => {
        $($docs)+
        pub async fn fencing_token(&self) -> Result<u64, $crate::error::Error> {
            self.$f.fencing_token().await
        }
    };
    (@call ttl, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            /// The ttl of the last acquisition or extension.
        ]
        pub fn ttl(&self) -> std::time::Duration {
            self.$f.ttl()
        });
    };
    (@call valid_until, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            #[doc = concat!(
                "The instant (client's monotonic clock) until which the ",
                $noun,
                " can be",
            )]
            /// relied on: `start + ttl − drift`, where `start` is taken before the first
            /// request is sent.
        ]
        pub fn valid_until(&self) -> std::time::Instant {
            self.$f.valid_until()
        });
    };
    (@call validity, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            /// The validity left: zero once [`valid_until`](Self::valid_until) has passed, or
            #[doc = concat!(
                "once the client's [shutdown](crate::RedLock::shutdown) released the ",
                $noun,
                ".",
            )]
            /// Never more than the nodes are guaranteed to keep it, drift allowance included.
        ]
        pub fn validity(&self) -> std::time::Duration {
            self.$f.validity()
        });
    };
    (@call is_valid, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            /// Whether the validity has not yet run out (and the client's
            #[doc = concat!(
                "[shutdown](crate::RedLock::shutdown) has not released the ",
                $noun,
                ").",
            )]
        ]
        pub fn is_valid(&self) -> bool {
            self.$f.is_valid()
        });
    };
    (@call acquired_on, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            #[doc = concat!(
                "How many nodes had confirmed the ",
                $noun,
                " when it was granted: the quorum,",
            )]
            /// since the decision is taken at the quorum-th yes (the others may confirm a
            /// moment later).
        ]
        pub fn acquired_on(&self) -> usize {
            self.$f.acquired_on()
        });
    };
    (@call failures, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            #[doc = concat!(
                "Every node that did not record the ",
                $noun,
                " when it was granted, as",
            )]
            /// [`Lock::failures`](crate::Lock::failures) lists them.
        ]
        pub fn failures(&self) -> &[$crate::error::NodeError] {
            self.$f.failures()
        });
    };
    (@call extend, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            #[doc = concat!("Extends the ", $noun, " by its ttl, measured from now. See")]
            /// [`extend_for`](Self::extend_for).
            ///
            /// # Errors
            /// As [`extend_for`](Self::extend_for).
        ]
        pub async fn extend(&mut self) -> Result<std::time::Duration, $crate::error::Error> {
            self.$f.extend().await
        });
    };
    (@call extend_for, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            #[doc = concat!(
                "Extends the ",
                $noun,
                " to `ttl` from now, by each node's clock, and returns",
            )]
            /// the new validity, decided as a lock's extension is
            /// ([`Lock::extend_for`](crate::Lock::extend_for)).
            ///
            /// # Errors
            /// As [`Lock::extend_for`](crate::Lock::extend_for).
        ]
        pub async fn extend_for(
            &mut self,
            ttl: std::time::Duration,
        ) -> Result<std::time::Duration, $crate::error::Error> {
            self.$f.extend_for(ttl).await
        });
    };
    (@call release, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            #[doc = concat!(
                "Removes the ",
                $noun,
                "'s claim on every node and announces the release to",
            )]
            /// the waiters; decided as [`Lock::release`](crate::Lock::release) is.
            ///
            /// # Errors
            /// As [`Lock::release`](crate::Lock::release).
        ]
        pub async fn release(
            self,
        ) -> Result<$crate::engine::held::Released, $crate::error::Error> {
            self.$f.release().await
        });
    };
    (@call leave, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            #[doc = concat!(
                "Lets go of the ",
                $noun,
                " without releasing it: its claim stays on the nodes",
            )]
            /// until its ttl runs out, and neither a drop nor the client's
            /// [shutdown](crate::RedLock::shutdown) removes it.
        ]
        pub fn leave(self) {
            self.$f.leave();
        });
    };
    (@call keep_alive, $f:tt, $noun:literal, $docs:tt) => {
        $crate::api::held_face::held_face!(@doc $docs [
            #[doc = concat!(
                "Keeps the ",
                $noun,
                " alive in the background until it is released or",
            )]
            /// dropped, as [`Lock::keep_alive`](crate::Lock::keep_alive) keeps a lock.
            ///
            /// # Errors
            /// As [`Lock::keep_alive`](crate::Lock::keep_alive).
        ]
        pub fn keep_alive(
            self,
            keep: $crate::config::KeepAlive,
        ) -> Result<$crate::api::kept::KeptLock, $crate::error::Error> {
            self.$f.keep_alive(keep).map($crate::api::kept::KeptLock)
        });
    };

    // The docs given with the call, or else the default.
    (@doc [] [$($default:tt)*] $($item:tt)*) => {
        $($default)*
        $($item)*
    };
    (@doc [$($given:tt)+] [$($default:tt)*] $($item:tt)*) => {
        $($given)+
        $($item)*
    };
}
pub(crate) use held_face;
