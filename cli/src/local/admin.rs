//! Who may read the admin routes: a client on this machine that connected directly, or anyone
//! presenting `Authorization: Bearer $TGQ_ADMIN_TOKEN`.
//!
//! A tunnel or reverse proxy on the same machine (ngrok, cloudflared, nginx) also connects from a
//! loopback address while forwarding somebody else's request; such requests carry a forwarding
//! header, and are not treated as local.

use std::net::SocketAddr;

use axum::http::{header, HeaderMap};
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
    fn a_request_forwarded_by_a_local_proxy_is_not_treated_as_loopback() {
        let forwarded = headers(&[("x-forwarded-for", "198.51.100.4")]);
        assert_eq!(
            authorize(peer("127.0.0.1"), &forwarded, Some(&token())),
            Err(Forbidden::TokenMissing)
        );
    }
}
