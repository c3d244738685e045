//! Server-side printing: the `Table` rows `kubectl get` shows, per resource type.
