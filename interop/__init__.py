"""Other engines and formats: Hugging Face Marian and CTranslate2 (conversion, export, search)."""
