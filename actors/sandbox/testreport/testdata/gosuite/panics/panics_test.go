package panics

import "testing"

func TestBefore(t *testing.T) {}

func TestPanics(t *testing.T) { panic("boom") }

func TestAfter(t *testing.T) {}
