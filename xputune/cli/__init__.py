"""Thin typer commands: parse flags, call one function below, render. No logic lives here."""
