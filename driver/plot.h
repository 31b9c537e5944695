/* plot.h: --plot's figures as SVG (driver/plot.c): spike rasters, firing-rate histograms and
 * traces of a run's recordings (driver/record.c), and training's curves per epoch
 * (driver/train.c). Plain SVG text, no library; every file written whole (rt_write_file). Each
 * bool function is false after reporting. */
#ifndef SNN_DRIVER_PLOT_H
#define SNN_DRIVER_PLOT_H

#include <stdbool.h>
#include <stdint.h>

/* one recorded value of a run, as the figures need it */
typedef struct PlotSeries {
    const char *layer, *kind; /* "s1", "LIF" */
    const char *name;         /* as --record named it: "s1" or "s1.v" */
    const char *model;
    const float *data; /* [nsamples][timesteps][numel]: one sample (raster, trace) or all
                          (rates) */
    int timesteps;
    int64_t numel;    /* neurons of the layer */
    int64_t nsamples; /* rates: how many samples data holds */
    int64_t sample;   /* raster, trace: which sample data is, for the title */
    double threshold; /* trace: a dashed line at this value, unless NAN */
    const char *threshold_name;
} PlotSeries;

/* DIR/KIND_NAME.svg (DIR/KIND.svg with name NULL), malloc'd */
char *plot_path(const char *dir, const char *kind, const char *name);
/* refuses a path that exists and is not a directory (before a run spends its time) */
bool plot_dir_check(const char *dir);
/* makes the directory if it is missing */
bool plot_dir_make(const char *dir);
/* time on x, neuron on y, a mark per spike (-1 spikes in another colour); at most 400 neurons
 * (and 200,000 cells) drawn, every k-th past that, as the title says */
bool plot_raster(const char *path, const PlotSeries *s);
/* a histogram of each neuron's rate: spikes per step over every sample and step */
bool plot_rates(const char *path, const PlotSeries *s);
/* the value of 5 neurons (evenly spaced over the layer) at each step, and the threshold */
bool plot_trace(const char *path, const PlotSeries *s);

/* training's loss and accuracies, one point per epoch, redrawn into DIR/curves.svg after each */
typedef struct PlotCurves PlotCurves;
PlotCurves *plot_curves_new(const char *dir, const char *model);
/* epoch's figures (test_acc < 0: no test set) added and the figure rewritten */
bool plot_curves_add(PlotCurves *c, int64_t epoch, double loss, double train_acc, double test_acc);
void plot_curves_free(PlotCurves *c);

#endif
