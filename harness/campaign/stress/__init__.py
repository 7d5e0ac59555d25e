"""`harness stress`: a user's command over and over (`engine`), its fix arms side by side."""
