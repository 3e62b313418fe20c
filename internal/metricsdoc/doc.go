// Package metricsdoc reads the metrics the chart's alerts and dashboard
// query (ChartQueries), and holds the test that keeps README.md's metrics table
// and the code's metrics in step: every onepool_* series the code defines
// has a row, and every row names a series the code defines.
package metricsdoc
