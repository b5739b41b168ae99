//! The web console: the bundle that `scripts/console-build.sh` builds from
//! `console/` (CodeMirror, uPlot and Eddy's own code, minified), compiled
//! into the binary and served at `/` and `/console/…`, so that a plain
//! `cargo build` yields a server with its console and nothing is fetched at
//! run time. The files are public like `/healthz` (they hold no data); the
//! console's calls to `/v0` carry the API key its login prompt asks for.
//!
//! Every answer forbids framing and content sniffing and sets a content
//! security policy that lets the page run only its own script: the console
//! builds its pages without `innerHTML`, and the policy stops a row or a
//! name that looks like markup from ever running as script.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The bundle's files: name, content type, contents.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../console/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../console/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../console/app.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("../console/favicon.svg"),
    ),
    (
        "THIRD-PARTY.txt",
        "text/plain; charset=utf-8",
        include_bytes!("../console/THIRD-PARTY.txt"),
    ),
];

/// CodeMirror and uPlot set styles on elements, hence `'unsafe-inline'`
/// for styles only.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     frame-ancestors 'none'; form-action 'self'";

/// The routes `/` and `/console/{file}`, to merge into the server's router.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|h: HeaderMap| async move { serve("index.html", &h) }),
        )
        .route(
            "/console/{file}",
            get(|Path(file): Path<String>, h: HeaderMap| async move { serve(&file, &h) }),
        )
}

/// A validator of this build's bundle: it changes whenever a file does.
fn etag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        // FNV-1a over every file, in order.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for (_, _, bytes) in FILES {
            for b in bytes.iter() {
                hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("\"{hash:016x}\"")
    })
}

/// Where `EDDY_CONSOLE_DIR` points, for working on the console: its files
/// (only the names in [`FILES`]) are read from there on every request
/// instead of from the binary, so that a rebuilt bundle shows on reload.
fn dev_dir() -> Option<&'static std::path::Path> {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| std::env::var_os("EDDY_CONSOLE_DIR").map(Into::into))
        .as_deref()
}

fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some((name, kind, bytes)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return crate::error::ApiError::new(StatusCode::NOT_FOUND, "NotFound", "no such file")
            .into_response();
    };
    if let Some(dir) = dev_dir() {
        let mut response = match std::fs::read(dir.join(name)) {
            Ok(bytes) => ([(header::CONTENT_TYPE, *kind)], bytes).into_response(),
            Err(e) => crate::error::ApiError::internal(format!("EDDY_CONSOLE_DIR: {name}: {e}"))
                .into_response(),
        };
        secure(response.headers_mut());
        return response;
    }
    let tag = etag();
    let mut response = if request
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == tag.as_bytes())
    {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, *kind)], *bytes).into_response()
    };
    response
        .headers_mut()
        .insert(header::ETAG, HeaderValue::from_static(tag));
    secure(response.headers_mut());
    response
}

/// The headers every console answer carries.
fn secure(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_names_is_served() {
        let index = std::str::from_utf8(FILES[0].2).unwrap();
        for (name, _, bytes) in FILES {
            assert!(!bytes.is_empty(), "{name} is empty");
        }
        for linked in ["/console/app.js", "/console/app.css"] {
            assert!(index.contains(linked), "index.html links {linked}");
        }
    }

    #[test]
    fn unknown_files_are_not_found_and_answers_carry_the_policy() {
        let h = HeaderMap::new();
        assert_eq!(serve("../Cargo.toml", &h).status(), StatusCode::NOT_FOUND);
        let ok = serve("app.js", &h);
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[header::CONTENT_SECURITY_POLICY], POLICY);
        let mut again = HeaderMap::new();
        again.insert(header::IF_NONE_MATCH, HeaderValue::from_static(etag()));
        assert_eq!(serve("app.js", &again).status(), StatusCode::NOT_MODIFIED);
    }
}
