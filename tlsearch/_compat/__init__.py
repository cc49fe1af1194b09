"""The private parts of upstream libraries tlsearch relies on, one module per upstream; nothing else touches them."""
