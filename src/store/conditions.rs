//! How a [`CommitStore`](crate::CommitStore) makes conditional writes: through leases, or
//! through the inner store where it enforces the condition itself.

/// How conditional writes are made. Set with
/// [`CommitStore::with_conditions`](crate::CommitStore::with_conditions).
///
/// ```
/// use dynacommit::Conditions;
/// assert_eq!(Conditions::default(), Conditions::Lease);
/// assert_eq!("auto".parse::<Conditions>(), Ok(Conditions::Auto));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Conditions {
    /// Every conditional write takes a lease (the protocol of `docs/protocol.md`). The
    /// default, and the only mode that is safe while object_store 0.12.5 writers (whose
    /// data writes are plain PUTs) share the paths. The write under the lease carries its
    /// condition, as in every mode, unless the store refuses the header: on a store that
    /// enforces conditions, writers with and without leases then exclude each other.
    #[default]
    Lease,
    /// Conditional writes go straight to the inner store, which must enforce them
    /// (`If-None-Match`, `If-Match`, copy-if-not-exists): one request, no lease table.
    /// Safe only if every writer of the paths uses conditions the store enforces.
    Native,
    /// Probe the inner store (see [`Enforced`]; again every ten minutes): native if it
    /// enforces every condition, else leases for everything (a native create and a copy
    /// leased where the client cannot send copy-if-not-exists would not exclude each
    /// other). Same fleet rule as [`Native`](Self::Native) when it goes native.
    Auto,
}

impl std::str::FromStr for Conditions {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "lease" => Ok(Self::Lease),
            "native" => Ok(Self::Native),
            "auto" => Ok(Self::Auto),
            other => Err(format!(
                "unknown condition mode {other:?}: use lease, native or auto"
            )),
        }
    }
}

/// Which conditions the inner store was found to enforce, by
/// [`CommitStore::enforced`](crate::CommitStore::enforced).
///
/// Found by a probe under `.dynacommit-probe/` (removed afterwards): an object created
/// twice with `If-None-Match: *` (the first must be applied, the second refused), updated
/// with an `If-Match` naming an ETag it does not have (must be refused) and then with one
/// naming its own (must be applied), and copied twice to one target with
/// copy-if-not-exists (the first applied, the second refused). A condition counts as
/// enforced only if the store both refuses what it must and applies what it must: a store
/// refusing every conditional write would fail every commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Enforced {
    /// `PutMode::Create` is refused over an existing object.
    pub create: bool,
    /// `PutMode::Update` is applied on the object's own ETag and refused on another.
    pub update: bool,
    /// `CopyMode::Create` is refused over an existing target.
    pub copy: bool,
}

impl Enforced {
    /// Every condition (what [`Conditions::Native`] assumes).
    pub const ALL: Self = Self {
        create: true,
        update: true,
        copy: true,
    };
}

impl std::fmt::Display for Enforced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let yes = |b: bool| if b { "enforced" } else { "not enforced" };
        write!(
            f,
            "create-if-absent {}, update-if-ETag {}, copy-if-absent {}",
            yes(self.create),
            yes(self.update),
            yes(self.copy)
        )
    }
}
