//! The web dashboard: `GET /` and `GET /assets/{*path}`.
//!
//! Every file is compiled into the binary (`coordinator/assets/`), so a
//! coordinator serves its dashboard with no files beside it and never reads
//! the filesystem for it. The page is plain JavaScript modules with no build
//! step, plus a vendored copy of uPlot (MIT, see `assets/vendor/uplot/`); it
//! polls the JSON API under `/api/v1/` and references nothing outside this
//! server (the index's Content-Security-Policy holds it to that).
//!
//! Responses carry an ETag (a hash of the file, computed at compile time)
//! and `Cache-Control: no-cache`: browsers revalidate each time and get a
//! 304 while the binary is unchanged, and a new binary's files at once.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// One compiled-in file.
#[derive(Debug)]
struct Asset {
    /// Path under `/assets/`.
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// FNV-1a of `body`.
    hash: u64,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// The index may load scripts, styles and data from this origin only.
const INDEX_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// FNV-1a, 64 bits: cheap enough to run at compile time over every asset.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        Asset {
            path: $path,
            content_type: $content_type,
            body: include_bytes!(concat!("../../assets/", $path)),
            hash: fnv1a(include_bytes!(concat!("../../assets/", $path))),
        }
    };
}

/// `GET /`.
const INDEX: Asset = asset!("index.html", HTML);

/// Everything under `/assets/`; nothing else is served there.
const ASSETS: &[Asset] = &[
    asset!("app.js", JS),
    asset!("alerts.js", JS),
    asset!("bigjob.js", JS),
    asset!("chart.js", JS),
    asset!("dom.js", JS),
    asset!("job.js", JS),
    asset!("matrix.js", JS),
    asset!("overview.js", JS),
    asset!("settings.js", JS),
    asset!("snapshots.js", JS),
    asset!("app.css", CSS),
    asset!("vendor/uplot/uPlot.iife.min.js", JS),
    asset!("vendor/uplot/uPlot.min.css", CSS),
    asset!("vendor/uplot/LICENSE", TEXT),
    asset!("vendor/uplot/README", TEXT),
];

/// `GET /`: the dashboard's page.
pub async fn index(headers: HeaderMap) -> Response {
    let mut response = serve(&INDEX, &headers);
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(INDEX_CSP),
    );
    response
}

/// `GET /assets/{*path}`: one file of the fixed table.
pub async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(a) => serve(a, &headers),
        None => {
            let shown: String = path.chars().take(100).collect();
            ApiError::NotFound(format!(
                "no dashboard asset {shown:?}; the dashboard is at / and loads its own files"
            ))
            .into_response()
        }
    }
}

/// The file, or 304 when the client already holds this version.
fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let etag = format!("\"{:016x}\"", asset.hash);
    let fresh = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == etag
        });
    let headers = [
        (header::CONTENT_TYPE, asset.content_type.to_owned()),
        (header::CACHE_CONTROL, "no-cache".to_owned()),
        (header::ETAG, etag),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
    ];
    if fresh {
        (StatusCode::NOT_MODIFIED, headers).into_response()
    } else {
        (StatusCode::OK, headers, asset.body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;
    use std::collections::BTreeSet;

    async fn body(r: Response) -> Vec<u8> {
        to_bytes(r.into_body(), 1 << 20).await.unwrap().to_vec()
    }

    fn expected_type(path: &str) -> &'static str {
        match path.rsplit_once('.').map(|(_, ext)| ext) {
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("html") => "text/html; charset=utf-8",
            _ => "text/plain; charset=utf-8",
        }
    }

    #[tokio::test]
    async fn every_asset_is_served_with_its_content_type_and_bytes() {
        for a in ASSETS {
            let r = asset(Path(a.path.to_owned()), HeaderMap::new()).await;
            assert_eq!(r.status(), StatusCode::OK, "{}", a.path);
            let h = r.headers();
            assert_eq!(h[header::CONTENT_TYPE], expected_type(a.path), "{}", a.path);
            assert_eq!(h[header::CACHE_CONTROL], "no-cache");
            assert!(h.contains_key(header::ETAG));
            let on_disk =
                std::fs::read(format!("{}/assets/{}", env!("CARGO_MANIFEST_DIR"), a.path)).unwrap();
            assert_eq!(body(r).await, on_disk, "{}", a.path);
        }
        let r = index(HeaderMap::new()).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            expected_type("index.html")
        );
        assert!(r.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("default-src 'self'"));
    }

    #[tokio::test]
    async fn an_unknown_asset_is_404_with_a_reason() {
        for path in ["nope.js", "../Cargo.toml", "vendor/uplot", "index.html", ""] {
            let r = asset(Path(path.to_owned()), HeaderMap::new()).await;
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
            let text = String::from_utf8(body(r).await).unwrap();
            assert!(text.contains("no dashboard asset"), "{text}");
        }
    }

    #[tokio::test]
    async fn a_client_holding_the_current_version_gets_304() {
        let first = asset(Path("app.js".into()), HeaderMap::new()).await;
        let etag = first.headers()[header::ETAG].clone();
        let mut again = HeaderMap::new();
        again.insert(header::IF_NONE_MATCH, etag.clone());
        let r = asset(Path("app.js".into()), again).await;
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(r.headers()[header::ETAG], etag);
        assert!(body(r).await.is_empty());
        let mut stale = HeaderMap::new();
        stale.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"0\""));
        let r = asset(Path("app.js".into()), stale).await;
        assert_eq!(r.status(), StatusCode::OK);
    }

    /// Values of `attr="..."` in `text`.
    fn attr_values<'a>(text: &'a str, attr: &str) -> Vec<&'a str> {
        let needle = format!("{attr}=\"");
        text.match_indices(&needle)
            .map(|(i, _)| {
                let rest = &text[i + needle.len()..];
                &rest[..rest.find('"').unwrap()]
            })
            .collect()
    }

    fn text_of(a: &Asset) -> &'static str {
        std::str::from_utf8(a.body).unwrap()
    }

    #[test]
    fn the_page_references_only_assets_in_the_table() {
        let served: BTreeSet<&str> = ASSETS.iter().map(|a| a.path).collect();
        let index = text_of(&INDEX);
        let mut refs = attr_values(index, "src");
        refs.extend(attr_values(index, "href"));
        let mut local = 0;
        for r in refs {
            if r.starts_with('#') || r.starts_with("data:") {
                continue;
            }
            let path = r
                .strip_prefix("assets/")
                .unwrap_or_else(|| panic!("index.html references {r:?} outside assets/"));
            assert!(
                served.contains(path),
                "index.html loads {r:?}, not in the table"
            );
            local += 1;
        }
        assert!(local >= 4, "the page loads its scripts and styles");
        // Module imports, relative to assets/.
        for a in ASSETS
            .iter()
            .filter(|a| a.path.ends_with(".js") && !a.path.starts_with("vendor/"))
        {
            let text = text_of(a);
            let imports = text.lines().filter(|l| l.starts_with("import ")).count();
            let targets: Vec<&str> = text
                .match_indices("} from \"")
                .map(|(i, m)| {
                    let rest = &text[i + m.len()..];
                    &rest[..rest.find('"').unwrap()]
                })
                .collect();
            assert_eq!(
                targets.len(),
                imports,
                "{}: every import names a module",
                a.path
            );
            for target in targets {
                let path = target
                    .strip_prefix("./")
                    .unwrap_or_else(|| panic!("{} imports {target:?}, not ./", a.path));
                assert!(
                    served.contains(path),
                    "{} imports {target:?}, not in the table",
                    a.path
                );
            }
        }
    }

    #[test]
    fn our_files_reference_nothing_outside_this_server() {
        for a in std::iter::once(&INDEX).chain(ASSETS.iter()) {
            if a.path.starts_with("vendor/") {
                continue;
            }
            let text = text_of(a);
            for bad in [
                "http://",
                "https://",
                "//cdn",
                "url(",
                "@import",
                "innerHTML",
            ] {
                assert!(!text.contains(bad), "{} contains {bad:?}", a.path);
            }
        }
    }

    #[test]
    fn every_file_in_the_assets_folder_is_in_the_table() {
        fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, base, out);
                } else {
                    out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
        let mut files = Vec::new();
        walk(&base, &base, &mut files);
        let served: BTreeSet<&str> = ASSETS.iter().map(|a| a.path).collect();
        for f in files {
            assert!(
                f == INDEX.path || served.contains(f.as_str()),
                "assets/{f} is not served: add it to ASSETS"
            );
        }
    }
}
