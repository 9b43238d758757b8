// Package layout holds the test that checks the map of packages in
// docs/design.md ("Where things are") against what the packages import.
package layout
