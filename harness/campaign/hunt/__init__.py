"""`harness hunt`: a user's pytest suite run in threads (`engine`); its command line (`options`),
the plugin each run loads (`plugin`), what a run reports (`junit`, `progress`), the records a
hunt keeps (`records`), the verdict per test (`verdicts`) and the report (`report`)."""
