"""SVG pictures of layouts, thread-value maps, MMA atoms and bank maps (plain SVG text, no dependencies)."""
