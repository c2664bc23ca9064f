"""Delivery, shared by both producers (the Atropos env and the live-session proxy): the group builder,
the groups file, the send spool and cursor, replay into an Atropos API, and the policy adapter tracker."""
