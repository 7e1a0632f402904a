"""What Fetch remembers between requests: fetch sessions (KIP-227, ``sessions``), a
connection's last sessionless fetch (``memo``) and the answers built from them
(``answer``). Imports ``protocol``, ``topics`` (the brokers a Fetch names) and the
partition layer."""
