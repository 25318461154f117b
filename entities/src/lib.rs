//! sea-orm entities of the service's tables, one module per table.
