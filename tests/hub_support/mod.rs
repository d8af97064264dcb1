//! A local server that plays the Hugging Face Hub for the tests: model info with siblings and
//! sha, the tree listing (paged with `Link` headers), `resolve/{revision}/{file}` with ETag,
//! `X-Repo-Commit` and a redirect to a storage host for LFS files, range requests there, and
//! 401/403/404 with `X-Error-Code` as the Hub sends them. Faults on demand: a connection cut
//! after some bytes, a corrupted blob, a slow blob.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// The token the gated repository accepts.
pub const GOOD_TOKEN: &str = "hf_granted";

/// One file of a test repository.
pub struct HubFile {
    pub path: String,
    pub bytes: Arc<Vec<u8>>,
    pub sha256: String,
    pub git_sha1: String,
    pub lfs: bool,
}

impl HubFile {
    pub fn new(path: &str, bytes: Vec<u8>) -> Self {
        let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let sha256 = hex(&Sha256::digest(&bytes));
        let mut git = Sha1::new();
        git.update(format!("blob {}\0", bytes.len()).as_bytes());
        git.update(&bytes);
        let lfs = [".gguf", ".safetensors"].iter().any(|e| path.ends_with(e));
        Self { path: path.into(), sha256, git_sha1: hex(&git.finalize()), lfs, bytes: Arc::new(bytes) }
    }

    fn etag(&self) -> &str {
        if self.lfs { &self.sha256 } else { &self.git_sha1 }
    }
}

/// A test repository.
pub struct HubRepo {
    pub id: String,
    pub commit: String,
    pub files: Vec<HubFile>,
    pub gated: bool,
}

#[derive(Default)]
struct Faults {
    /// sha256 → bytes after which the next download of it is cut.
    cut: HashMap<String, usize>,
    /// sha256 of blobs served with one byte changed.
    corrupt: HashSet<String>,
    /// sha256 of blobs served slowly (64 KiB every 5 ms).
    slow: HashSet<String>,
}

struct Hub {
    base: String,
    repos: Vec<HubRepo>,
    log: Mutex<Vec<String>>,
    faults: Mutex<Faults>,
}

/// The running server; stops when dropped.
pub struct FakeHub {
    pub url: String,
    hub: Arc<Hub>,
    _runtime: tokio::runtime::Runtime,
}

impl FakeHub {
    pub fn start(repos: Vec<HubRepo>) -> Self {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let hub = Arc::new(Hub { base: url.clone(), repos, log: Mutex::default(), faults: Mutex::default() });
        let app = axum::Router::new().fallback(handle).with_state(Arc::clone(&hub));
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, hub, _runtime: runtime }
    }

    /// The requests served so far (`METHOD PATH`), and forgets them.
    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut self.hub.log.lock().unwrap())
    }

    fn file(&self, path: &str) -> &HubFile {
        self.hub.repos.iter().flat_map(|r| &r.files).find(|f| f.path == path).unwrap()
    }

    /// Cuts the next download of `path` after `bytes` bytes.
    pub fn cut_next(&self, path: &str, bytes: usize) {
        let sha = self.file(path).sha256.clone();
        self.hub.faults.lock().unwrap().cut.insert(sha, bytes);
    }

    /// Serves `path` with one byte changed.
    pub fn corrupt(&self, path: &str, on: bool) {
        let sha = self.file(path).sha256.clone();
        let mut faults = self.hub.faults.lock().unwrap();
        if on {
            faults.corrupt.insert(sha)
        } else {
            faults.corrupt.remove(&sha)
        };
    }

    /// Serves `path` slowly.
    pub fn slow(&self, path: &str) {
        let sha = self.file(path).sha256.clone();
        self.hub.faults.lock().unwrap().slow.insert(sha);
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    Response::builder()
        .status(status)
        .header("X-Error-Code", code)
        .header("X-Error-Message", message)
        .body(Body::from(format!("{{\"error\": \"{message}\"}}")))
        .unwrap()
}

fn json(value: serde_json::Value) -> Response {
    Response::builder()
        .header("Content-Type", "application/json")
        .body(Body::from(value.to_string()))
        .unwrap()
}

async fn handle(State(hub): State<Arc<Hub>>, method: Method, headers: HeaderMap, uri: Uri) -> Response {
    let path = uri.path().to_owned();
    let range =
        headers.get("range").and_then(|v| v.to_str().ok()).map(|r| format!(" {r}")).unwrap_or_default();
    hub.log
        .lock()
        .unwrap()
        .push(format!("{method} {}{range}", uri.path_and_query().map_or("", |p| p.as_str())));
    if let Some(sha) = path.strip_prefix("/cdn/") {
        return blob(&hub, sha, &headers).await;
    }
    let (api, rest) = match path.strip_prefix("/api/models/") {
        Some(rest) => (true, rest),
        None => (false, path.trim_start_matches('/')),
    };
    let parts: Vec<&str> = rest.splitn(5, '/').collect();
    if parts.len() < 4 {
        return error(StatusCode::NOT_FOUND, "", "Not found");
    }
    let id = format!("{}/{}", parts[0], parts[1]);
    let Some(repo) = hub.repos.iter().find(|r| r.id == id) else {
        return error(StatusCode::UNAUTHORIZED, "RepoNotFound", "Repository not found");
    };
    let revision = parts[3];
    if revision != "main" && revision != repo.commit {
        return error(StatusCode::NOT_FOUND, "RevisionNotFound", "Invalid rev id");
    }
    match (api, parts[2]) {
        (true, "revision") => json(serde_json::json!({
            "id": repo.id, "sha": repo.commit, "gated": if repo.gated { "manual" } else { "false" },
            "siblings": repo.files.iter().map(|f| serde_json::json!({"rfilename": f.path})).collect::<Vec<_>>(),
        })),
        (true, "tree") => tree(&hub, repo, &uri),
        (false, "resolve") => resolve(&hub, repo, parts.get(4).copied().unwrap_or_default(), &headers),
        _ => error(StatusCode::NOT_FOUND, "", "Not found"),
    }
}

/// The listing, three entries a page.
fn tree(hub: &Hub, repo: &HubRepo, uri: &Uri) -> Response {
    let cursor: usize = uri
        .query()
        .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("cursor=")))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut files: Vec<&HubFile> = repo.files.iter().collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let page: Vec<serde_json::Value> = files
        .iter()
        .skip(cursor)
        .take(3)
        .map(|f| {
            let mut entry =
                serde_json::json!({"type": "file", "oid": f.git_sha1, "size": f.bytes.len(), "path": f.path});
            if f.lfs {
                entry["lfs"] =
                    serde_json::json!({"oid": f.sha256, "size": f.bytes.len(), "pointerSize": 134});
            }
            entry
        })
        .collect();
    let mut response = json(serde_json::Value::Array(page));
    if cursor + 3 < files.len() {
        let next = format!("<{}{}?recursive=true&cursor={}>; rel=\"next\"", hub.base, uri.path(), cursor + 3);
        response.headers_mut().insert("Link", next.parse().unwrap());
    }
    response
}

fn resolve(hub: &Hub, repo: &HubRepo, file: &str, headers: &HeaderMap) -> Response {
    if repo.gated {
        match headers.get("authorization").and_then(|v| v.to_str().ok()) {
            None => {
                let message = format!(
                    "Access to model {} is restricted. You must have access to it and be authenticated to access it. Please log in.",
                    repo.id
                );
                return error(StatusCode::UNAUTHORIZED, "GatedRepo", &message);
            }
            Some(token) if token != format!("Bearer {GOOD_TOKEN}") => {
                let message = format!(
                    "Access to model {} is restricted and you are not in the authorized list. Visit {}/{} to ask for access.",
                    repo.id, hub.base, repo.id
                );
                return error(StatusCode::FORBIDDEN, "GatedRepo", &message);
            }
            Some(_) => {}
        }
    }
    let Some(f) = repo.files.iter().find(|f| f.path == file) else {
        return error(StatusCode::NOT_FOUND, "EntryNotFound", &format!("{file} does not exist"));
    };
    let builder =
        Response::builder().header("X-Repo-Commit", &repo.commit).header("ETag", format!("\"{}\"", f.etag()));
    if f.lfs {
        builder
            .status(StatusCode::FOUND)
            .header("X-Linked-Etag", format!("\"{}\"", f.sha256))
            .header("X-Linked-Size", f.bytes.len())
            // Another host name for the same server, as the Hub sends its storage host.
            .header("Location", format!("{}/cdn/{}", hub.base.replace("127.0.0.1", "localhost"), f.sha256))
            .body(Body::empty())
            .unwrap()
    } else {
        builder.header("Content-Length", f.bytes.len()).body(Body::from(f.bytes.to_vec())).unwrap()
    }
}

async fn blob(hub: &Hub, sha: &str, headers: &HeaderMap) -> Response {
    let Some(f) = hub.repos.iter().flat_map(|r| &r.files).find(|f| f.sha256 == sha) else {
        return error(StatusCode::NOT_FOUND, "", "no such blob");
    };
    let (cut, corrupt, slow) = {
        let mut faults = hub.faults.lock().unwrap();
        (faults.cut.remove(sha), faults.corrupt.contains(sha), faults.slow.contains(sha))
    };
    let mut bytes = f.bytes.to_vec();
    if corrupt {
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
    }
    let start: usize = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
        .unwrap_or(0);
    let total = bytes.len();
    let mut builder =
        Response::builder().header("Content-Length", total - start).header("Accept-Ranges", "bytes");
    if start > 0 {
        builder = builder
            .status(StatusCode::PARTIAL_CONTENT)
            .header("Content-Range", format!("bytes {start}-{}/{total}", total - 1));
    }
    let body = bytes.split_off(start);
    let limit = cut.unwrap_or(usize::MAX);
    let chunks: Vec<Vec<u8>> = body.chunks(64 << 10).map(<[u8]>::to_vec).collect();
    let stream = async_stream(chunks, limit, slow);
    builder.body(Body::from_stream(stream)).unwrap()
}

/// The chunks as a body stream: an error after `limit` bytes (the connection cut), a pause
/// between chunks when `slow`.
fn async_stream(
    chunks: Vec<Vec<u8>>,
    limit: usize,
    slow: bool,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    futures_util::stream::unfold(Some((chunks.into_iter(), 0usize)), move |state| async move {
        let (mut chunks, sent) = state?;
        if sent >= limit {
            return Some((Err(std::io::Error::other("connection cut")), None));
        }
        let mut chunk = chunks.next()?;
        if slow {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        chunk.truncate(limit - sent);
        let sent = sent + chunk.len();
        Some((Ok(chunk), Some((chunks, sent))))
    })
}
