//! Lease timing: the settings every writer of a table should share.

use std::str::FromStr;
use std::time::Duration;

/// The longest lease timeout (and poll interval) accepted: a day.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest record TTL accepted: a year.
pub const MAX_TTL: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// The table name used when none is given.
pub const DEFAULT_TABLE: &str = "dynacommit_leases";

/// How leases are timed. The defaults are object_store 0.12's: a 20 s lease, a clock skew
/// rate of 3, records kept an hour, conflicts polled every 100 ms.
///
/// A waiter reclaims a lease only after the record it saw has stood unchanged for
/// `timeout * max_clock_skew_rate` on its own monotonic clock, and a holder gives up its
/// operation when it cannot renew within `timeout` on its own clock; so as long as no
/// clock runs more than `max_clock_skew_rate` times faster than another, the holder has
/// always given up before anyone reclaims. Deadlines and waits use monotonic clocks only;
/// the wall clock sets record lifetimes (`ttl`, for DynamoDB's clean-up) and the first
/// generation of lock records. `docs/protocol.md` lists what each assumes.
///
/// Parse `table[:timeout_ms]` (object_store 0.12's `dynamo:` syntax, without the prefix):
///
/// ```
/// use std::time::Duration;
/// use dynacommit::lease::LeaseConfig;
///
/// let config: LeaseConfig = "delta_leases:5000".parse()?;
/// assert_eq!(config.table, "delta_leases");
/// assert_eq!(config.timeout, Duration::from_secs(5));
/// # Ok::<(), dynacommit::lease::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The DynamoDB table (ignored by the in-process table).
    pub table: String,
    /// How long a lease is good for without renewal.
    pub timeout: Duration,
    /// The most one clock may run faster than another (at least 1).
    pub max_clock_skew_rate: u32,
    /// How long records stay before DynamoDB's TTL removes them. Only bounds the table's
    /// size; must be well above `timeout * max_clock_skew_rate`.
    pub ttl: Duration,
    /// How often a waiting writer re-checks the object and the lease.
    pub poll_interval: Duration,
    /// How often a holder renews; `None` for a third of `timeout`. At most half of it.
    pub renew_interval: Option<Duration>,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            table: DEFAULT_TABLE.to_owned(),
            timeout: Duration::from_secs(20),
            max_clock_skew_rate: 3,
            ttl: Duration::from_secs(60 * 60),
            poll_interval: Duration::from_millis(100),
            renew_interval: None,
        }
    }
}

/// A lease setting is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid lease setting: {problem}")]
pub struct ConfigError {
    /// What is wrong, and what to do.
    problem: String,
}

impl ConfigError {
    /// A setting is unusable, for `problem`.
    pub(crate) fn new(problem: impl Into<String>) -> Self {
        Self {
            problem: problem.into(),
        }
    }
}

impl LeaseConfig {
    /// The defaults with another table.
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            ..Self::default()
        }
    }

    /// With another lease timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// With another clock skew rate.
    pub fn with_max_clock_skew_rate(mut self, rate: u32) -> Self {
        self.max_clock_skew_rate = rate;
        self
    }

    /// With another record lifetime.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// With another poll interval.
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// With another renew interval (at most half the timeout).
    pub fn with_renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// How often a holder renews.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval.unwrap_or(self.timeout / 3)
    }

    /// How long a waiter lets a lease stand unchanged before reclaiming it.
    pub fn reclaim_after(&self) -> Duration {
        stale_after(self.timeout, self.max_clock_skew_rate)
    }

    /// How long after its HEAD was sent a check sent beside a fresh acquisition may be
    /// answered and still be trusted under the lease: `timeout x skew`, or half of what
    /// the record TTL leaves beyond it if that is less.
    ///
    /// Why: a write landing between the check's read and the PutItem that found no record
    /// belonged to a record TTL deleted in between. Every protocol write lands within
    /// `timeout x skew` of its record's last write (assumption 4), and a record lives at
    /// least `ttl - W` after its last write, W being how far its writer's wall clock lags
    /// DynamoDB's (assumption 5 bounds W by `(ttl - timeout x skew) / 2`). So the two can
    /// meet only if the check's read and the PutItem lie more than
    /// `ttl - W - timeout x skew` apart, more than this window.
    pub fn beside_check_window(&self) -> Duration {
        let reclaim = self.reclaim_after();
        reclaim.min(self.ttl.saturating_sub(reclaim) / 2)
    }

    /// The defaults, overridden by `DYNACOMMIT_LEASE_TABLE` (`table[:timeout_ms]`),
    /// `DYNACOMMIT_LEASE_TIMEOUT_MS`, `DYNACOMMIT_MAX_CLOCK_SKEW_RATE`,
    /// `DYNACOMMIT_LEASE_TTL_SECS` and `DYNACOMMIT_POLL_INTERVAL_MS` where set.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// Like [`from_env`](Self::from_env), reading variables through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut config = match lookup("DYNACOMMIT_LEASE_TABLE") {
            Some(spec) => spec.parse()?,
            None => Self::default(),
        };
        let number = |name: &str| -> Result<Option<u64>, ConfigError> {
            lookup(name)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| {
                        ConfigError::new(format!("{name}={v:?} is not a whole number"))
                    })
                })
                .transpose()
        };
        if let Some(ms) = number("DYNACOMMIT_LEASE_TIMEOUT_MS")? {
            config.timeout = Duration::from_millis(ms);
        }
        if let Some(rate) = number("DYNACOMMIT_MAX_CLOCK_SKEW_RATE")? {
            config.max_clock_skew_rate = u32::try_from(rate).map_err(|_| {
                ConfigError::new(format!(
                    "DYNACOMMIT_MAX_CLOCK_SKEW_RATE={rate} is too large"
                ))
            })?;
        }
        if let Some(secs) = number("DYNACOMMIT_LEASE_TTL_SECS")? {
            config.ttl = Duration::from_secs(secs);
        }
        if let Some(ms) = number("DYNACOMMIT_POLL_INTERVAL_MS")? {
            config.poll_interval = Duration::from_millis(ms);
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the settings, naming the first that is wrong and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.table.trim().is_empty() {
            return Err(ConfigError::new("the table name is empty"));
        }
        if self.timeout < Duration::from_millis(1) {
            return Err(ConfigError::new("the lease timeout must be at least 1 ms"));
        }
        // Upper bounds keep every deadline computation far from overflow, and catch a
        // timeout given in the wrong unit.
        if self.timeout > MAX_TIMEOUT {
            return Err(ConfigError::new(format!(
                "the lease timeout ({:?}) is above {MAX_TIMEOUT:?}: give it in milliseconds",
                self.timeout
            )));
        }
        if self.ttl > MAX_TTL || self.poll_interval > MAX_TIMEOUT {
            return Err(ConfigError::new(format!(
                "the record TTL must be at most {MAX_TTL:?} and the poll interval at most {MAX_TIMEOUT:?}"
            )));
        }
        if self.max_clock_skew_rate == 0 {
            return Err(ConfigError::new(
                "max_clock_skew_rate must be at least 1 (3 is the usual choice)",
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(ConfigError::new("the poll interval must be above zero"));
        }
        if let Some(renew) = self.renew_interval
            && (renew.is_zero() || renew > self.timeout / 2)
        {
            return Err(ConfigError::new(format!(
                "the renew interval ({renew:?}) must be above zero and at most half the lease \
                 timeout ({:?}), so an uncertain renewal can be retried before the lease runs out",
                self.timeout
            )));
        }
        if self.ttl < self.reclaim_after().saturating_mul(2) {
            return Err(ConfigError::new(format!(
                "the record TTL ({:?}) must be at least twice timeout x skew rate ({:?}), or \
                 records could vanish while writers still wait on them",
                self.ttl,
                self.reclaim_after()
            )));
        }
        Ok(())
    }
}

impl FromStr for LeaseConfig {
    type Err = ConfigError;

    /// `table` or `table:timeout_ms`, other settings at their defaults.
    fn from_str(spec: &str) -> Result<Self, ConfigError> {
        let (table, timeout) = match spec.split_once(':') {
            Some((table, ms)) => {
                let ms: u64 = ms.trim().parse().map_err(|_| {
                    ConfigError::new(format!(
                        "{spec:?}: the part after ':' must be the lease timeout in milliseconds"
                    ))
                })?;
                (table, Duration::from_millis(ms))
            }
            None => (spec, LeaseConfig::default().timeout),
        };
        let config = LeaseConfig::new(table.trim()).with_timeout(timeout);
        config.validate()?;
        Ok(config)
    }
}

/// The part of a lease a holder never uses: a tenth of it. No guarded request starts
/// later than `deadline - margin` on the holder's clock, which leaves the margin for the
/// time between deciding to send and the request leaving the process.
pub(crate) fn safety_margin(timeout: Duration) -> Duration {
    timeout / 10
}

/// `timeout * rate`, saturating instead of overflowing on absurd record values.
pub(crate) fn stale_after(timeout: Duration, rate: u32) -> Duration {
    timeout.saturating_mul(rate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn defaults_match_object_store_0_12() {
        let d = LeaseConfig::default();
        assert_eq!(d.timeout, Duration::from_secs(20));
        assert_eq!(d.max_clock_skew_rate, 3);
        assert_eq!(d.ttl, Duration::from_secs(3600));
        assert_eq!(d.poll_interval, Duration::from_millis(100));
        assert_eq!(d.reclaim_after(), Duration::from_secs(60));
        d.validate().unwrap();
    }

    #[test]
    fn parses_table_and_optional_timeout() {
        let plain: LeaseConfig = " leases ".parse().unwrap();
        assert_eq!(plain.table, "leases");
        assert_eq!(plain.timeout, Duration::from_secs(20));
        let timed: LeaseConfig = "leases:1500".parse().unwrap();
        assert_eq!(timed.timeout, Duration::from_millis(1500));
    }

    #[test]
    fn bad_strings_say_what_is_wrong() {
        let e = "leases:soon"
            .parse::<LeaseConfig>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("milliseconds"), "{e}");
        let e = ":100".parse::<LeaseConfig>().unwrap_err().to_string();
        assert!(e.contains("table name"), "{e}");
        let e = "t:0".parse::<LeaseConfig>().unwrap_err().to_string();
        assert!(e.contains("at least 1 ms"), "{e}");
    }

    #[test]
    fn reads_the_environment() {
        let vars: HashMap<&str, &str> = [
            ("DYNACOMMIT_LEASE_TABLE", "envtable:3000"),
            ("DYNACOMMIT_MAX_CLOCK_SKEW_RATE", "2"),
            ("DYNACOMMIT_POLL_INTERVAL_MS", "25"),
        ]
        .into();
        let c = LeaseConfig::from_lookup(|n| vars.get(n).map(|v| v.to_string())).unwrap();
        assert_eq!(c.table, "envtable");
        assert_eq!(c.timeout, Duration::from_secs(3));
        assert_eq!(c.max_clock_skew_rate, 2);
        assert_eq!(c.poll_interval, Duration::from_millis(25));

        let bad = LeaseConfig::from_lookup(|n| {
            (n == "DYNACOMMIT_LEASE_TIMEOUT_MS").then(|| "20s".to_string())
        })
        .unwrap_err();
        assert!(
            bad.to_string().contains("DYNACOMMIT_LEASE_TIMEOUT_MS"),
            "{bad}"
        );
    }

    #[test]
    fn a_ttl_shorter_than_a_wait_is_refused() {
        let e = LeaseConfig::default()
            .with_ttl(Duration::from_secs(90))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("TTL"), "{e}");
        assert!(
            LeaseConfig::default()
                .with_max_clock_skew_rate(0)
                .validate()
                .is_err()
        );
    }

    #[test]
    fn absurd_settings_are_refused_not_overflowed() {
        let e = "t:18446744073709551615".parse::<LeaseConfig>().unwrap_err();
        assert!(e.to_string().contains("milliseconds"), "{e}");
        let huge = LeaseConfig::default().with_ttl(Duration::MAX);
        assert!(huge.validate().is_err());
        let slow = LeaseConfig::default().with_poll_interval(Duration::MAX);
        assert!(slow.validate().is_err());
    }

    #[test]
    fn absurd_timeouts_saturate() {
        assert_eq!(stale_after(Duration::MAX, 3), Duration::MAX);
    }
}
