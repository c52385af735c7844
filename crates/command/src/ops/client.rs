//! Reaching local mode's store from a `tgq` command: directly when it is free, else through the
//! running `tgq local` that holds it, at the loopback address it wrote to `<data-dir>/local.addr`,
//! whose admin routes serve the same views and run the same use cases.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tgq_embedded::{EmbeddedStore, StoreError, StoreOptions};

use crate::config::ADDR_FILE;

/// Where a view came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Read from the store file; `tgq local` is not running.
    Store,
    /// Answered by the running `tgq local` at this address.
    Running(SocketAddr),
}

/// Local mode's store: opened by this command, or held by the running `tgq local` at an address.
pub enum Local {
    /// Opened here; `tgq local` is not running.
    Store(Arc<EmbeddedStore>),
    /// Held by the running `tgq local` at this address.
    Running(SocketAddr),
}

/// How a command opens the store when `tgq local` does not hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only to read: nothing is created or written, readers never keep `tgq local` from starting,
    /// and a data directory the caller cannot write can be read.
    Read,
    /// To change it (a replay, a purge): the store's lock is held while the command runs.
    Write,
}

/// Opens the store in `data_dir` for `access`, or finds the running `tgq local` that holds it.
pub async fn open(data_dir: &Path, access: Access) -> anyhow::Result<Local> {
    if !data_dir.join(tgq_embedded::FILE_NAME).exists() {
        bail!(
            "there is no tgq store in {}: run `tgq local` first, or pass --data-dir (or --stack \
             for a deployment on AWS)",
            data_dir.display()
        );
    }
    let dir = data_dir.to_owned();
    let opened = tokio::task::spawn_blocking(move || match access {
        Access::Read => EmbeddedStore::open_read_only(&dir, StoreOptions::default()),
        Access::Write => EmbeddedStore::open(&dir, StoreOptions::default()),
    })
    .await?;
    match opened {
        Ok(store) => Ok(Local::Store(store)),
        Err(StoreError::AlreadyOpen { .. }) => Ok(Local::Running(running_addr(data_dir)?)),
        // While a running instance reopens the store after a failed write (a full disk), the
        // file is briefly not held, and a read-only open finds it mid-commit: that instance answers.
        Err(error @ StoreError::NeedsRepair { .. }) => match running_addr(data_dir) {
            Ok(addr) => Ok(Local::Running(addr)),
            Err(_) => Err(error.into()),
        },
        Err(error) => Err(error.into()),
    }
}

/// Closes a store this command opened, off the async threads (its writer thread is joined).
pub async fn close(store: Arc<EmbeddedStore>) {
    let _ = tokio::task::spawn_blocking(move || drop(store)).await;
}

/// Reads a view through the store when it is free, else through the running instance's admin
/// `route`, which serves the same view.
pub async fn read<T, F>(data_dir: &Path, route: &str, direct: F) -> anyhow::Result<(T, Source)>
where
    T: DeserializeOwned + Send + 'static,
    F: FnOnce(&EmbeddedStore) -> anyhow::Result<T> + Send + 'static,
{
    reach(data_dir, Method::GET, route, direct).await
}

/// Runs `direct` on the store opened read-only when it is free, else asks the running instance
/// with `method` on its admin `route`, which does the same and answers with the same shape.
pub async fn reach<T, F>(
    data_dir: &Path,
    method: Method,
    route: &str,
    direct: F,
) -> anyhow::Result<(T, Source)>
where
    T: DeserializeOwned + Send + 'static,
    F: FnOnce(&EmbeddedStore) -> anyhow::Result<T> + Send + 'static,
{
    match open(data_dir, Access::Read).await? {
        Local::Store(store) => {
            let read = store.clone();
            let value = tokio::task::spawn_blocking(move || direct(&read)).await;
            close(store).await;
            let value = value??;
            Ok((value, Source::Store))
        }
        Local::Running(addr) => {
            let request = client()?.request(method, format!("http://{addr}{route}"));
            Ok((view(addr, route, request).await?, Source::Running(addr)))
        }
    }
}

/// The address a running `tgq local` wrote, made reachable over loopback.
fn running_addr(data_dir: &Path) -> anyhow::Result<SocketAddr> {
    let path = data_dir.join(ADDR_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "the store in {} is held by another process, but {} cannot be read: \
             is `tgq local` still starting?",
            data_dir.display(),
            path.display()
        )
    })?;
    let addr: SocketAddr = text
        .trim()
        .parse()
        .with_context(|| format!("{} does not hold a socket address", path.display()))?;
    Ok(loopback(addr))
}

/// A server listening on every interface (0.0.0.0 or ::) is reached over loopback.
pub fn loopback(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// GETs an admin route of the running instance and reads its view.
pub async fn get<T: DeserializeOwned>(addr: SocketAddr, route: &str) -> anyhow::Result<T> {
    let request = client()?.get(format!("http://{addr}{route}"));
    view(addr, route, request).await
}

/// POSTs `body` to an admin route of the running instance and reads its view.
pub async fn post<T: DeserializeOwned>(
    addr: SocketAddr,
    route: &str,
    body: &impl serde::Serialize,
) -> anyhow::Result<T> {
    let request = client()?.post(format!("http://{addr}{route}")).json(body);
    view(addr, route, request).await
}

fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        // A backup of a large store takes a while; reads answer at once.
        .timeout(Duration::from_secs(600))
        .build()?)
}

/// Sends an admin request and unwraps its `{"ok", "result"}` answer into a view.
async fn view<T: DeserializeOwned>(
    addr: SocketAddr,
    route: &str,
    mut request: reqwest::RequestBuilder,
) -> anyhow::Result<T> {
    if let Ok(token) = std::env::var("TGQ_ADMIN_TOKEN") {
        if !token.is_empty() {
            request = request.bearer_auth(token);
        }
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("the running tgq local at {addr} does not answer"))?;
    let status = response.status();
    let body: Value = response.json().await.with_context(|| {
        format!("the running tgq local at {addr} answered {status} without JSON")
    })?;
    let result = body.get("result").cloned().unwrap_or(Value::Null);
    if !status.is_success() {
        let text = match &result {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        bail!("the running tgq local at {addr} answered {status}: {text}");
    }
    serde_json::from_value(result).with_context(|| {
        format!("the running tgq local at {addr} answered {route} with another shape (is it another version of tgq?)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_listening_everywhere_is_reached_over_loopback() {
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(
            loopback(any),
            "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
        );
        let v6: SocketAddr = "[::]:9".parse().unwrap();
        assert_eq!(loopback(v6), "[::1]:9".parse::<SocketAddr>().unwrap());
    }
}
