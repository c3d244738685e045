//! The cluster's store, as `tandem server` opens it and `tandem migrate` moves it.
//!
//! `--etcd-servers URL[,URL…]` (with `--etcd-cafile/--etcd-certfile/--etcd-keyfile`, as
//! kube-apiserver spells them) puts the cluster in etcd v3; without it the embedded SQLite store in
//! the data dir holds it. With etcd, the API server compacts history itself every
//! `--etcd-compaction-interval` (5 minutes, as kube-apiserver; `0` leaves it to etcd).
//!
//! `tandem migrate --from sqlite:DIR --to etcd:URL[,URL…]` copies a cluster's whole state from one
//! store to another, so a cluster started on SQLite can move to etcd (and back). The API server
//! must be stopped first: the source is read at one revision, and writes made meanwhile would be
//! lost. Every key is copied with its value unchanged. Revisions are the destination's own (a
//! store numbers its writes itself), so every object gets a new `resourceVersion`, as after
//! upstream's etcd restore into a new cluster: clients re-list, which informers do by themselves.
//! The destination must be empty, so two clusters' state is never mixed; the copy is checked key
//! by key before the command reports success.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tandem_store::Store;
use tandem_store::etcd::{EtcdOptions, EtcdStore};
use tandem_store::sqlite::{SqliteOptions, SqliteStore};

/// How many keys one read of the source returns.
const PAGE: usize = 500;

/// Flags of `tandem migrate`.
#[derive(Args, Clone, Debug)]
pub struct MigrateArgs {
    /// The store to copy from: `sqlite:DIR` (a data dir) or `etcd:URL[,URL…]`.
    #[arg(long)]
    pub from: String,
    /// The store to copy to (it must be empty): `sqlite:DIR` or `etcd:URL[,URL…]`.
    #[arg(long)]
    pub to: String,
    #[command(flatten)]
    pub tls: EtcdTls,
}

/// The store flags of `tandem server` and `tandem up`.
#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    /// etcd members to keep the cluster in (kube-apiserver's flag), `http://HOST:2379,…`;
    /// default: the embedded SQLite store in the data dir.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    #[command(flatten)]
    pub etcd_tls: EtcdTls,
    /// How often the API server compacts etcd's history, as a Go duration (`5m`, `90s`); `0`
    /// turns it off.
    #[arg(long, default_value = "5m", value_parser = crate::leader::parse_go_duration)]
    pub etcd_compaction_interval: Duration,
}

impl Default for StoreArgs {
    fn default() -> Self {
        StoreArgs {
            etcd_servers: Vec::new(),
            etcd_tls: EtcdTls::default(),
            etcd_compaction_interval: Duration::from_secs(300),
        }
    }
}

impl StoreArgs {
    /// Opens the store these flags name; the SQLite store lives in `data_dir`.
    pub async fn open(&self, data_dir: &Path) -> anyhow::Result<Arc<dyn Store>> {
        if self.etcd_servers.is_empty() {
            let db = data_dir.join("state.db");
            let store = SqliteStore::open(&db, SqliteOptions::default())
                .with_context(|| format!("cannot open the store {}", db.display()))?;
            return Ok(Arc::new(store));
        }
        let mut options = self.etcd_tls.options(self.etcd_servers.clone());
        options.compaction_interval = Some(self.etcd_compaction_interval).filter(|d| !d.is_zero());
        let store = EtcdStore::connect(options)
            .await
            .with_context(|| format!("cannot reach etcd at {}", self.etcd_servers.join(",")))?;
        Ok(Arc::new(store))
    }

    /// How the start-up banner names the store.
    pub fn describe(&self, data_dir: &Path) -> String {
        if self.etcd_servers.is_empty() {
            format!("SQLite ({})", data_dir.join("state.db").display())
        } else {
            format!("etcd ({})", self.etcd_servers.join(","))
        }
    }
}

/// Client TLS for etcd endpoints, as kube-apiserver spells the flags.
#[derive(Args, Clone, Debug, Default)]
pub struct EtcdTls {
    /// CA bundle that signed the etcd servers' certificates.
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,
    /// Client certificate presented to etcd.
    #[arg(long, requires = "etcd_keyfile")]
    pub etcd_certfile: Option<PathBuf>,
    /// Key of the client certificate.
    #[arg(long, requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,
}

impl EtcdTls {
    /// Connection options for `endpoints`, without a compactor (the caller sets one).
    pub fn options(&self, endpoints: Vec<String>) -> EtcdOptions {
        EtcdOptions {
            endpoints,
            ca_file: self.etcd_cafile.clone(),
            cert_file: self.etcd_certfile.clone(),
            key_file: self.etcd_keyfile.clone(),
            compaction_interval: None,
            ..EtcdOptions::default()
        }
    }
}

/// Splits `a,b,,c` into its non-empty, trimmed parts.
pub fn endpoints(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Opens the store a `sqlite:DIR` or `etcd:URLS` location names.
/// A source (`must_exist`) must be a data dir that holds a store already.
async fn open(location: &str, tls: &EtcdTls, must_exist: bool) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(dir) = location.strip_prefix("sqlite:") {
        let db = PathBuf::from(dir).join("state.db");
        anyhow::ensure!(
            !must_exist || db.is_file(),
            "{} holds no store ({} is missing)",
            dir,
            db.display()
        );
        if let Some(parent) = db.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let options = SqliteOptions {
            compaction_interval: None,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open(&db, options).with_context(|| {
            format!("cannot open {} (is a server running on it?)", db.display())
        })?;
        return Ok(Arc::new(store));
    }
    if let Some(urls) = location.strip_prefix("etcd:") {
        let list = endpoints(urls);
        anyhow::ensure!(!list.is_empty(), "{location:?} names no etcd endpoint");
        let store = EtcdStore::connect(tls.options(list))
            .await
            .with_context(|| format!("cannot connect to {location}"))?;
        return Ok(Arc::new(store));
    }
    anyhow::bail!("{location:?} is not a store: use sqlite:DIR or etcd:URL[,URL…]")
}

/// What a copy did.
#[derive(Debug, PartialEq, Eq)]
pub struct Copied {
    /// Keys copied.
    pub keys: usize,
    /// The source revision they were read at.
    pub source_revision: i64,
}

/// Copies every key of `from` (read at one revision) into the empty store `to`, then checks
/// that `to` holds exactly those keys and values.
pub async fn copy(from: &dyn Store, to: &dyn Store) -> anyhow::Result<Copied> {
    let existing = to.count("").await.context("cannot read the destination")?;
    anyhow::ensure!(
        existing == 0,
        "the destination already holds {existing} keys: migrate only into an empty store"
    );
    let mut start_after: Option<String> = None;
    let mut revision = None;
    let mut keys = 0usize;
    loop {
        let page = from
            .list("", start_after.as_deref(), Some(PAGE), revision)
            .await
            .context("cannot read the source")?;
        revision = Some(page.revision);
        for kv in &page.items {
            to.create(&kv.key, kv.value.clone())
                .await
                .with_context(|| format!("cannot write {}", kv.key))?;
        }
        keys += page.items.len();
        start_after = page.items.last().map(|kv| kv.key.clone());
        if !page.more || start_after.is_none() {
            break;
        }
    }
    let source_revision = revision.unwrap_or(0);
    verify(from, to, source_revision).await?;
    Ok(Copied {
        keys,
        source_revision,
    })
}

/// Compares the source at `revision` with the destination now, key by key.
async fn verify(from: &dyn Store, to: &dyn Store, revision: i64) -> anyhow::Result<()> {
    let mut after: Option<String> = None;
    loop {
        let expected = from
            .list("", after.as_deref(), Some(PAGE), Some(revision))
            .await?;
        let actual = to.list("", after.as_deref(), Some(PAGE), None).await?;
        let pairs = |items: &[tandem_store::KeyValue]| {
            items
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect::<Vec<_>>()
        };
        anyhow::ensure!(
            pairs(&expected.items) == pairs(&actual.items),
            "the copy differs from the source after {:?}",
            after.as_deref().unwrap_or("the first key")
        );
        after = expected.items.last().map(|kv| kv.key.clone());
        if !expected.more || after.is_none() {
            anyhow::ensure!(
                !actual.more,
                "the destination holds keys the source does not"
            );
            return Ok(());
        }
    }
}

/// `tandem migrate`.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let from = open(&args.from, &args.tls, true).await?;
    let to = open(&args.to, &args.tls, false).await?;
    let copied = copy(from.as_ref(), to.as_ref()).await?;
    println!(
        "copied {} keys from {} (revision {}) to {}; every object has a new resourceVersion there",
        copied.keys, args.from, copied.source_revision, args.to
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn sqlite(dir: &std::path::Path) -> Arc<dyn Store> {
        let options = SqliteOptions {
            compaction_interval: None,
            ..SqliteOptions::default()
        };
        Arc::new(SqliteStore::open(&dir.join("state.db"), options).expect("open"))
    }

    #[tokio::test]
    async fn every_key_is_copied_with_its_value_across_pages_and_deleted_keys_stay_gone() {
        let (a, b) = (
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        );
        let (from, to) = (sqlite(a.path()), sqlite(b.path()));
        for i in 0..(PAGE + 7) {
            let key = format!("/registry/configmaps/default/c{i:04}");
            from.create(&key, Bytes::from(format!("{{\"n\":{i}}}")))
                .await
                .expect("create");
        }
        from.delete("/registry/configmaps/default/c0003", None)
            .await
            .expect("delete");
        let copied = copy(from.as_ref(), to.as_ref()).await.expect("copy");
        assert_eq!(copied.keys, PAGE + 6);
        assert_eq!(to.count("").await.expect("count"), PAGE + 6);
        let kv = to
            .get("/registry/configmaps/default/c0500")
            .await
            .expect("get")
            .expect("present");
        assert_eq!(kv.value, Bytes::from_static(b"{\"n\":500}"));
        assert!(
            to.get("/registry/configmaps/default/c0003")
                .await
                .expect("get")
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_destination_that_holds_keys_is_refused_and_left_alone() {
        let (a, b) = (
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        );
        let (from, to) = (sqlite(a.path()), sqlite(b.path()));
        from.create("/registry/namespaces/a", Bytes::from_static(b"{}"))
            .await
            .expect("create");
        to.create("/registry/namespaces/b", Bytes::from_static(b"{}"))
            .await
            .expect("create");
        let err = copy(from.as_ref(), to.as_ref()).await.expect_err("refused");
        assert!(err.to_string().contains("already holds 1 keys"), "{err}");
        assert_eq!(to.count("").await.expect("count"), 1);
    }

    #[test]
    fn endpoint_lists_are_split_and_trimmed() {
        assert_eq!(
            endpoints("http://a:2379, http://b:2379,,"),
            vec!["http://a:2379", "http://b:2379"]
        );
    }
}
