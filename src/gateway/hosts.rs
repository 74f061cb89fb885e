//! Virtual-host addressing: `BUCKET.DOMAIN` names the bucket in the Host header, as AWS
//! S3 and most SDKs' default addressing do. Any other host (an IP address, `localhost`,
//! the domain itself) is path-style: the bucket is the path's first segment.
//!
//! s3s's own `SingleDomain` would take any other host for a bucket's CNAME
//! (`Host: 127.0.0.1:9000` names bucket `127.0.0.1:9000`), breaking path-style clients.

use s3s::S3Result;
use s3s::host::{S3Host, VirtualHost};

pub(super) struct Hosts {
    /// The domain buckets are named under, lowercase, without a port.
    pub(super) domain: String,
}

impl S3Host for Hosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let bucket = name
            .len()
            .checked_sub(self.domain.len() + 1)
            .filter(|&end| {
                name.as_bytes().get(end) == Some(&b'.')
                    && name[end + 1..].eq_ignore_ascii_case(&self.domain)
            })
            .map(|end| &name[..end])
            .filter(|bucket| !bucket.is_empty());
        Ok(match bucket {
            Some(bucket) => VirtualHost::new(host).with_bucket(bucket.to_ascii_lowercase()),
            None => VirtualHost::new(host),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_under_the_domain_are_virtual_hosts_and_the_rest_path_style() {
        let hosts = Hosts {
            domain: "s3.lake.internal".into(),
        };
        let bucket = |host: &str| {
            hosts
                .parse_host_header(host)
                .unwrap()
                .bucket()
                .map(str::to_owned)
        };
        assert_eq!(
            bucket("lake.s3.lake.internal:9000").as_deref(),
            Some("lake")
        );
        assert_eq!(bucket("Lake.S3.Lake.Internal").as_deref(), Some("lake"));
        for path_style in [
            "127.0.0.1:9000",
            "localhost",
            "s3.lake.internal:9000",
            "xs3.lake.internal",
        ] {
            assert_eq!(bucket(path_style), None, "{path_style}");
        }
    }
}
