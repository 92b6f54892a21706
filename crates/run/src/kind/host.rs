//! This host as the kinds read it.

/// The root the host readers read under: this host's own.
pub(crate) fn root() -> &'static std::path::Path {
    std::path::Path::new("/")
}
