use super::*;

#[test]
fn pagination_may_not_leave_origin() {
    let t = Target::new("h", "r", None);
    let first = Url::parse("http://127.0.0.1:5000/v2/r/tags/list").unwrap();
    assert!(same_origin_join(&first, &first, "/v2/r/tags/list?last=x", &t, "link").is_ok());
    assert!(
        same_origin_join(
            &first,
            &first,
            "http://127.0.0.1:5000/v2/r/tags/list?last=x",
            &t,
            "link"
        )
        .is_ok()
    );
    let err =
        same_origin_join(&first, &first, "http://evil.example/steal", &t, "link").unwrap_err();
    assert!(err.to_string().contains("leaves the origin"), "{err}");
}

#[test]
fn digests() {
    assert_eq!(
        digest_of(b"", None),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let t = Target::new("h", "r", None);
    assert!(verify_digest(&t, &digest_of(b"x", None), b"x").is_ok());
    assert!(matches!(
        verify_digest(&t, &digest_of(b"x", None), b"y"),
        Err(RegistryError::DigestMismatch { .. })
    ));
}
