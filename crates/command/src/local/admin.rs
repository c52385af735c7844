//! Who may read the admin routes: a client on this machine that connected directly, or anyone
//! presenting `Authorization: Bearer $TGQ_ADMIN_TOKEN`.
//!
//! A tunnel or reverse proxy on the same machine (ngrok, cloudflared, nginx) also connects from a
//! loopback address while forwarding somebody else's request; such requests carry a forwarding
//! header, and are not treated as local. A browser on this machine may run somebody else's page:
//! a local request must name this machine in its `Host` (not a name rebound to 127.0.0.1) and,
//! when it carries an `Origin`, come from a page of this very address (not a form on another site).

use std::net::SocketAddr;

use axum::http::{header, HeaderMap, HeaderValue};
use secrecy::{ExposeSecret as _, SecretString};
use subtle::ConstantTimeEq as _;

/// Headers a proxy adds when it forwards a request.
const FORWARDING_HEADERS: [&str; 3] = ["forwarded", "x-forwarded-for", "x-real-ip"];

/// Why an admin request was refused; the text is the 403 answer's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Forbidden {
    /// Not loopback, and this server has no admin token.
    #[error("admin routes answer only clients on this machine (loopback), and TGQ_ADMIN_TOKEN is not set on this server")]
    NoTokenConfigured,
    /// Not loopback, and no bearer token was presented.
    #[error("admin routes answer only clients on this machine (loopback) or requests with `Authorization: Bearer <TGQ_ADMIN_TOKEN>`")]
    TokenMissing,
    /// A bearer token was presented and it is wrong.
    #[error("the bearer token is not TGQ_ADMIN_TOKEN")]
    TokenWrong,
    /// Loopback, but the request names another host: a name rebound to this machine.
    #[error("admin routes answer a client on this machine only when it names this machine (Host: localhost, 127.0.0.1 or [::1]), or with `Authorization: Bearer <TGQ_ADMIN_TOKEN>`")]
    NotThisMachine,
    /// Loopback, but sent by a page of another origin (a cross-site form or script).
    #[error("a page of another origin may not use the admin routes")]
    OtherOrigin,
}

/// Decides whether a request may read the admin routes.
pub fn authorize(
    peer: SocketAddr,
    headers: &HeaderMap,
    admin_token: Option<&SecretString>,
) -> Result<(), Forbidden> {
    match (bearer(headers), admin_token) {
        (Some(given), Some(expected)) => {
            return match bool::from(given.ct_eq(expected.expose_secret().as_bytes())) {
                true => Ok(()),
                false => Err(Forbidden::TokenWrong),
            };
        }
        (Some(_), None) if !is_direct_loopback(peer, headers) => {
            return Err(Forbidden::NoTokenConfigured)
        }
        _ => {}
    }
    if is_direct_loopback(peer, headers) {
        // A browser on this machine may be running somebody else's page: one whose name was
        // rebound to 127.0.0.1, or one posting a form across sites. Neither names this machine
        // as its own.
        if !names_this_machine(headers.get(header::HOST)) {
            return Err(Forbidden::NotThisMachine);
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            if !from_this_address(origin, headers.get(header::HOST)) {
                return Err(Forbidden::OtherOrigin);
            }
        }
        return Ok(());
    }
    match admin_token {
        Some(_) => Err(Forbidden::TokenMissing),
        None => Err(Forbidden::NoTokenConfigured),
    }
}

/// A loopback peer that is not a proxy forwarding someone else's request.
fn is_direct_loopback(peer: SocketAddr, headers: &HeaderMap) -> bool {
    let forwarded = FORWARDING_HEADERS
        .iter()
        .any(|name| headers.contains_key(*name));
    peer.ip().to_canonical().is_loopback() && !forwarded
}

/// Whether a `Host` header names this machine: `localhost` or a loopback address, any port. A
/// request without one (HTTP/1.0) passes: browsers always send it.
fn names_this_machine(host: Option<&HeaderValue>) -> bool {
    let Some(host) = host else {
        return true;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Whether an `Origin` is a page of the very address the request was sent to (its `Host`).
fn from_this_address(origin: &HeaderValue, host: Option<&HeaderValue>) -> bool {
    let (Ok(origin), Some(Ok(host))) = (origin.to_str(), host.map(HeaderValue::to_str)) else {
        return false;
    };
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    authority.is_some_and(|authority| authority.eq_ignore_ascii_case(host))
}

/// The token of an `Authorization: Bearer …` header.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let prefix = b"bearer ";
    match value.get(..prefix.len()) {
        Some(start) if start.eq_ignore_ascii_case(prefix) => {
            Some(value[prefix.len()..].trim_ascii())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40000)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn token() -> SecretString {
        SecretString::from("admin-token".to_owned())
    }

    #[test]
    fn a_direct_loopback_client_needs_no_token() {
        assert_eq!(
            authorize(peer("127.0.0.1"), &HeaderMap::new(), None),
            Ok(())
        );
        assert_eq!(
            authorize(peer("::1"), &HeaderMap::new(), Some(&token())),
            Ok(())
        );
        assert_eq!(
            authorize(peer("::ffff:127.0.0.1"), &HeaderMap::new(), None),
            Ok(())
        );
    }

    #[test]
    fn a_remote_client_is_refused_without_the_token_and_admitted_with_it() {
        let remote = peer("203.0.113.7");
        assert_eq!(
            authorize(remote, &HeaderMap::new(), None),
            Err(Forbidden::NoTokenConfigured)
        );
        assert_eq!(
            authorize(remote, &HeaderMap::new(), Some(&token())),
            Err(Forbidden::TokenMissing)
        );
        let wrong = headers(&[("authorization", "Bearer nope")]);
        assert_eq!(
            authorize(remote, &wrong, Some(&token())),
            Err(Forbidden::TokenWrong)
        );
        let right = headers(&[("authorization", "Bearer admin-token")]);
        assert_eq!(authorize(remote, &right, Some(&token())), Ok(()));
    }

    #[test]
    fn a_loopback_request_naming_another_host_is_refused_as_a_rebound_name_would_be() {
        // A page of evil.example whose name now resolves to 127.0.0.1 (DNS rebinding).
        let rebound = headers(&[("host", "evil.example:8080")]);
        assert_eq!(
            authorize(peer("127.0.0.1"), &rebound, None),
            Err(Forbidden::NotThisMachine)
        );
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "localhost",
        ] {
            let named = headers(&[("host", host)]);
            assert_eq!(authorize(peer("127.0.0.1"), &named, None), Ok(()), "{host}");
        }
    }

    #[test]
    fn a_page_of_another_origin_may_not_use_the_admin_routes_from_this_machine() {
        // A form on another site posting to the admin routes, from the user's own browser.
        let posted = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://evil.example"),
        ]);
        assert_eq!(
            authorize(peer("127.0.0.1"), &posted, None),
            Err(Forbidden::OtherOrigin)
        );
        let console = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        assert_eq!(authorize(peer("127.0.0.1"), &console, None), Ok(()));
    }

    #[test]
    fn a_request_forwarded_by_a_local_proxy_is_not_treated_as_loopback() {
        let forwarded = headers(&[("x-forwarded-for", "198.51.100.4")]);
        assert_eq!(
            authorize(peer("127.0.0.1"), &forwarded, Some(&token())),
            Err(Forbidden::TokenMissing)
        );
    }
}
