"""What every course plot and widget must have, checked the same way by every viz test."""


def assert_titled_and_labelled(fig, *, every_panel: bool = False) -> None:
    """A title (the panel's own, or the figure's suptitle), an x label on every panel and a y label
    somewhere. ``every_panel``: each panel needs its own title and both axis labels."""
    assert fig.axes, "no axes drawn"
    suptitle = fig._suptitle is not None and fig._suptitle.get_text()
    for ax in fig.axes:
        assert ax.get_title() or (suptitle and not every_panel), "a panel has no title"
        assert ax.get_xlabel(), f"panel {ax.get_title()!r} has no x label"
        if every_panel:
            assert ax.get_ylabel(), f"panel {ax.get_title()!r} has no y label"
    assert any(ax.get_ylabel() for ax in fig.axes), "no y label"


def static_html(widget) -> str:
    """The HTML a viewer without a live kernel shows for ``widget``, after checking that the live
    widget view is in the same display bundle."""
    bundle = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle, "no live widget view"
    return bundle["text/html"]
