//! The Hub's HTTP API, as far as fetching models needs it: a revision's commit
//! (`/api/models/ID/revision/REV`), a commit's file listing (`/api/models/ID/tree/COMMIT`),
//! a file's metadata (`HEAD /ID/resolve/REV/FILE`: `X-Repo-Commit`, `ETag`/`X-Linked-Etag`,
//! size, redirect) and its bytes from an offset (`Range`). Every request has timeouts;
//! the Hub's error answers (`X-Error-Code`) become [`HubError`]s that say what to do.

use std::io::Read;

use hf_hub::Repo;
use hf_hub::api::RepoInfo;
use serde::Deserialize;

use super::error::HubError;
use super::settings::HubSettings;

/// Most redirects one request follows.
const MAX_REDIRECTS: usize = 5;
/// Largest JSON answer read (a tree listing of a large repository stays far below).
const JSON_LIMIT: u64 = 64 << 20;

/// Why a request failed: the network (the cache may still serve), or the Hub's answer.
#[derive(Debug)]
pub enum Failure {
    /// No answer: refused, unresolvable, timed out, cut.
    Network(String),
    /// An answer that is an error.
    Hub(HubError),
}

impl From<HubError> for Failure {
    fn from(error: HubError) -> Self {
        Self::Hub(error)
    }
}

/// One file of a commit's listing, with what the Hub knows of its content.
#[derive(Debug, Clone, Deserialize)]
pub struct TreeEntry {
    /// `file` or `directory`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The path in the repository.
    pub path: String,
    /// Its size in bytes.
    #[serde(default)]
    pub size: u64,
    /// The git blob id.
    #[serde(default)]
    pub oid: String,
    /// Its LFS pointer's content, for large files.
    #[serde(default)]
    pub lfs: Option<LfsInfo>,
    /// Its Xet hash, where the Hub stores it so.
    #[serde(default, rename = "xetHash")]
    pub xet_hash: Option<String>,
}

/// An LFS file's SHA-256 and size.
#[derive(Debug, Clone, Deserialize)]
pub struct LfsInfo {
    /// The SHA-256 of the content.
    pub oid: String,
    /// The size of the content.
    pub size: u64,
}

/// What `HEAD resolve` says of a file.
#[derive(Debug, Clone)]
pub struct FileMetadata {
    /// The commit the revision resolved to.
    pub commit: String,
    /// The content's ETag without quotes: the SHA-256 of an LFS file, else its git blob id.
    pub etag: String,
    /// Its size, when the Hub said.
    pub size: Option<u64>,
    /// Where its bytes are (the redirect's target, else the resolve URL).
    pub location: String,
}

/// A client of one Hub endpoint.
#[derive(Debug)]
pub struct HubClient {
    agent: ureq::Agent,
    endpoint: String,
    token: Option<String>,
}

impl HubClient {
    /// A client with the settings' endpoint, token and timeouts.
    pub fn new(settings: &HubSettings) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .user_agent(concat!("pagoda/", env!("CARGO_PKG_VERSION")))
            .timeout_resolve(Some(settings.metadata_timeout))
            .timeout_connect(Some(settings.metadata_timeout))
            .timeout_recv_response(Some(settings.metadata_timeout))
            .timeout_per_read(Some(settings.download_timeout.max(settings.metadata_timeout)))
            .build()
            .into();
        Self { agent, endpoint: settings.endpoint.clone(), token: settings.token.clone() }
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The commit `revision` of `repo` points at now.
    pub fn commit(&self, repo: &Repo, id: &str) -> Result<String, Failure> {
        let url = format!("{}/api/{}", self.endpoint, repo.api_url());
        let mut response = self.request("GET", &url, None)?;
        check(&url, id, repo.revision(), None, &response)?;
        let info: RepoInfo = response
            .body_mut()
            .with_config()
            .limit(JSON_LIMIT)
            .read_json()
            .map_err(|e| protocol(&url, format!("bad repository info: {e}")))?;
        if super::layout::is_commit_hash(&info.sha) {
            Ok(info.sha)
        } else {
            Err(protocol(&url, format!("`{}` is not a commit hash", info.sha)).into())
        }
    }

    /// Every file of `repo` at `commit` (all pages of the listing).
    pub fn tree(&self, repo: &Repo, id: &str, commit: &str) -> Result<Vec<TreeEntry>, Failure> {
        let mut url =
            format!("{}/api/models/{}/tree/{commit}?recursive=true&expand=false", self.endpoint, repo.url());
        let mut files = Vec::new();
        loop {
            let mut response = self.request("GET", &url, None)?;
            check(&url, id, commit, None, &response)?;
            let next = header(&response, "link").and_then(|link| next_link(&link));
            let page: Vec<TreeEntry> = response
                .body_mut()
                .with_config()
                .limit(JSON_LIMIT)
                .read_json()
                .map_err(|e| protocol(&url, format!("bad tree listing: {e}")))?;
            files.extend(page.into_iter().filter(|e| e.kind == "file"));
            match next {
                Some(next) => url = next,
                None => return Ok(files),
            }
        }
    }

    /// The resolve URL of `file` in `repo` at `revision`.
    pub fn file_url(&self, repo: &Repo, revision: &str, file: &str) -> String {
        let revision = encode(revision, false);
        format!("{}/{}/resolve/{revision}/{}", self.endpoint, repo.url(), encode(file, true))
    }

    /// What the Hub says of `file` (`HEAD`), following the Hub's own relative redirects (a
    /// renamed repository) but not the one to the storage that holds the bytes.
    pub fn metadata(&self, url: &str, id: &str, revision: &str, file: &str) -> Result<FileMetadata, Failure> {
        let mut url = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let response = self.request("HEAD", &url, None)?;
            let status = response.status().as_u16();
            let redirect = (300..400).contains(&status);
            let location = header(&response, "location");
            if redirect {
                let target = location
                    .as_deref()
                    .ok_or_else(|| protocol(&url, format!("HTTP {status} without Location")))?;
                if target.starts_with('/') {
                    url = format!("{}{target}", origin(&url));
                    continue;
                }
            } else {
                check(&url, id, revision, Some(file), &response)?;
            }
            let commit = header(&response, "x-repo-commit")
                .ok_or_else(|| protocol(&url, "no X-Repo-Commit header".into()))?;
            let etag = header(&response, "x-linked-etag")
                .or_else(|| header(&response, "etag"))
                .map(|e| e.trim_start_matches("W/").trim_matches('"').to_owned())
                .filter(|e| !e.is_empty() && !e.contains(['/', '\\']) && e != "." && e != "..")
                .ok_or_else(|| protocol(&url, "no usable ETag header".into()))?;
            let size = header(&response, "x-linked-size")
                .or_else(|| if redirect { None } else { header(&response, "content-length") })
                .and_then(|s| s.trim().parse().ok());
            let location = if redirect { location.unwrap_or_default() } else { url };
            return Ok(FileMetadata { commit, etag, size, location });
        }
        Err(protocol(&url, "too many redirects".into()).into())
    }

    /// The bytes of `url` from offset `start` on (`Range`), following redirects (the token
    /// goes only to the Hub's own host). The answer is `206` from `start`, or `200` from 0 when
    /// the server ignores ranges.
    pub fn open(
        &self,
        url: &str,
        start: u64,
        id: &str,
        file: &str,
    ) -> Result<(u16, Box<dyn Read + Send>), Failure> {
        let mut url = url.to_owned();
        let range = (start > 0).then(|| format!("bytes={start}-"));
        for _ in 0..=MAX_REDIRECTS {
            let response = self.request("GET", &url, range.as_deref())?;
            let status = response.status().as_u16();
            if (300..400).contains(&status) {
                let location = header(&response, "location")
                    .ok_or_else(|| protocol(&url, format!("HTTP {status} without Location")))?;
                url =
                    if location.starts_with('/') { format!("{}{location}", origin(&url)) } else { location };
                continue;
            }
            if status == 206 {
                let from = header(&response, "content-range")
                    .and_then(|r| r.strip_prefix("bytes ")?.split('-').next()?.trim().parse::<u64>().ok());
                if from != Some(start) {
                    return Err(
                        protocol(&url, format!("asked for bytes from {start}, got range {from:?}")).into()
                    );
                }
            } else if status != 200 {
                check(&url, id, "", Some(file), &response)?;
                return Err(protocol(&url, format!("HTTP {status}")).into());
            }
            return Ok((status, Box::new(response.into_body().into_reader())));
        }
        Err(protocol(&url, "too many redirects".into()).into())
    }

    fn request(
        &self,
        method: &str,
        url: &str,
        range: Option<&str>,
    ) -> Result<ureq::http::Response<ureq::Body>, Failure> {
        let mut builder =
            ureq::http::Request::builder().method(method).uri(url).header("Accept-Encoding", "identity");
        if let Some(range) = range {
            builder = builder.header("Range", range);
        }
        if let Some(token) = &self.token
            && origin(url) == origin(&self.endpoint)
        {
            builder = builder.header("Authorization", format!("Bearer {token}"));
        }
        let request = builder.body(()).map_err(|e| protocol(url, e.to_string()))?;
        self.agent.run(request).map_err(|e| Failure::Network(network_reason(&e)))
    }
}

/// Says how the network failed, in words.
fn network_reason(error: &ureq::Error) -> String {
    match error {
        ureq::Error::Timeout(_) => format!("timed out: {error}"),
        _ => error.to_string(),
    }
}

/// Turns an error answer into the error it means; `Ok` for a success.
fn check(
    url: &str,
    id: &str,
    revision: &str,
    file: Option<&str>,
    response: &ureq::http::Response<ureq::Body>,
) -> Result<(), HubError> {
    let status = response.status().as_u16();
    if status < 400 {
        return Ok(());
    }
    let code = header(response, "x-error-code").unwrap_or_default();
    let message = header(response, "x-error-message").unwrap_or_default();
    // The repository's page: the id without its quant, file or revision.
    let repo: Vec<&str> = id.split(['@', ':']).next().unwrap_or_default().split('/').take(2).collect();
    let page = || format!("{}/{}", origin(url), repo.join("/"));
    Err(match code.as_str() {
        "GatedRepo" if status == 401 => HubError::NeedsToken { id: id.into(), url: page() },
        "GatedRepo" => HubError::NotAuthorized { id: id.into(), url: page(), message },
        "RepoNotFound" => HubError::RepoNotFound { id: id.into() },
        "RevisionNotFound" => HubError::RevisionNotFound { id: id.into(), revision: revision.into() },
        "EntryNotFound" => HubError::FileNotFound { id: id.into(), file: file.unwrap_or_default().into() },
        _ if status == 401 && message == "Invalid credentials in Authorization header" => {
            HubError::InvalidToken { id: id.into() }
        }
        _ if status == 401 => HubError::RepoNotFound { id: id.into() },
        _ => HubError::Http { url: url.into(), status, message },
    })
}

fn protocol(url: &str, reason: String) -> HubError {
    HubError::Protocol { url: url.into(), reason }
}

fn header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// The `rel="next"` target of a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"")
            .then(|| target.trim().trim_start_matches('<').trim_end_matches('>').to_owned())
    })
}

/// Percent-encodes a path for a URL, keeping `/` when `keep_slash`.
fn encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) || (keep_slash && byte == b'/') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_and_built() {
        assert_eq!(origin("http://127.0.0.1:8080/api/models/x"), "http://127.0.0.1:8080");
        assert_eq!(origin("https://h"), "https://h");
        assert_eq!(encode("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(encode("a b/c.gguf", true), "a%20b/c.gguf");
        let link = "<http://h/api/models/o/n/tree/c?cursor=2>; rel=\"next\", <http://h/x>; rel=\"prev\"";
        assert_eq!(next_link(link).as_deref(), Some("http://h/api/models/o/n/tree/c?cursor=2"));
        assert_eq!(next_link("<http://h/x>; rel=\"prev\""), None);
    }
}
