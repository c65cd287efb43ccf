//! Object names in the configuration, checked as the API server checks them: a name it would
//! refuse can never match an object, so it is a mistake in the file.

use crate::model::echo::echo;
use crate::model::labels::is_dns_subdomain;

/// The longest DNS-1123 subdomain (most object names, a Lease's, a scheduler name).
pub const MAX_SUBDOMAIN_LEN: usize = 253;
/// The longest DNS-1123 label (a namespace's name).
pub const MAX_LABEL_LEN: usize = 63;

/// Checks a DNS-1123 subdomain: lower-case letters, digits, `-` and `.`, each dot-separated
/// part starting and ending with a letter or digit, at most 253 characters.
pub fn dns_subdomain(value: &str) -> Result<(), String> {
    if value.len() > MAX_SUBDOMAIN_LEN {
        return Err(format!(
            "{} must be no more than {MAX_SUBDOMAIN_LEN} characters",
            echo(value)
        ));
    }
    if !is_dns_subdomain(value) {
        return Err(format!(
            "{} must be a lowercase RFC 1123 subdomain: lower case alphanumeric characters, \
             '-' or '.', starting and ending with an alphanumeric character (e.g. \
             'example.com')",
            echo(value)
        ));
    }
    Ok(())
}

/// Checks a DNS-1123 label: lower-case letters, digits and `-`, starting and ending with a
/// letter or digit, at most 63 characters.
pub fn dns_label(value: &str) -> Result<(), String> {
    if value.len() > MAX_LABEL_LEN {
        return Err(format!(
            "{} must be no more than {MAX_LABEL_LEN} characters",
            echo(value)
        ));
    }
    if value.contains('.') || !is_dns_subdomain(value) {
        return Err(format!(
            "{} must be a lowercase RFC 1123 label: lower case alphanumeric characters or \
             '-', starting and ending with an alphanumeric character (e.g. 'my-name')",
            echo(value)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains() {
        for good in [
            "gantry",
            "kube-scheduler",
            "a.b-c.d",
            "0",
            "x".repeat(253).as_str(),
        ] {
            assert_eq!(dns_subdomain(good), Ok(()), "{good}");
        }
        for bad in ["", "Gantry", "-a", "a-", "a..b", ".a", "a_b", "a b", "ä"] {
            assert!(dns_subdomain(bad).is_err(), "{bad:?}");
        }
        let long = "x".repeat(254);
        assert!(
            dns_subdomain(&long)
                .unwrap_err()
                .ends_with("(254 bytes) must be no more than 253 characters")
        );
    }

    #[test]
    fn labels() {
        for good in ["kube-system", "a", "x".repeat(63).as_str()] {
            assert_eq!(dns_label(good), Ok(()), "{good}");
        }
        for bad in ["", "a.b", "Kube", "-a", "x".repeat(64).as_str()] {
            assert!(dns_label(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            dns_label("a.b").unwrap_err(),
            "\"a.b\" must be a lowercase RFC 1123 label: lower case alphanumeric characters \
             or '-', starting and ending with an alphanumeric character (e.g. 'my-name')"
        );
    }
}
