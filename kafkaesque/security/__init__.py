"""Who may do what: ACLs and the authorizer, SCRAM (RFC 5802/7677) and client quotas
(their rules and their enforcement). Imports ``hot`` (where ACLs and quotas are kept)
and the shared modules."""
