-- A job store written by wattwise 0.1.0 (schema version 1, before Alembic) as a SQLite file: the
-- recurring-job history of two jobs, filled through that release's SqlJobStore, then dumped with
-- Python's sqlite3 Connection.iterdump(). tests/test_store_migrations.py upgrades it and checks
-- that no row is lost.
BEGIN TRANSACTION;
CREATE TABLE wattwise_jobs (
	name VARCHAR(128) NOT NULL, 
	batch_sizes TEXT NOT NULL, 
	default_batch_size INTEGER NOT NULL, 
	target_metric DOUBLE NOT NULL, 
	metric_mode VARCHAR(3) NOT NULL, 
	max_epochs INTEGER NOT NULL, 
	max_power_w DOUBLE NOT NULL, 
	eta DOUBLE NOT NULL, 
	beta DOUBLE NOT NULL, 
	created_at_s DOUBLE NOT NULL, 
	PRIMARY KEY (name)
);
INSERT INTO "wattwise_jobs" VALUES('bert/squad','[16, 32, 64]',32,84.0,'max',6,250.0,0.5,2.0,1700000074.0);
INSERT INTO "wattwise_jobs" VALUES('team.a/resnet50@v2','[128, 256]',256,0.65,'max',10,1200.0,0.3,2.5,1700001258.0);
CREATE TABLE wattwise_power_limits (
	job_name VARCHAR(128) NOT NULL, 
	batch_size INTEGER NOT NULL, 
	power_limit_w DOUBLE NOT NULL, 
	PRIMARY KEY (job_name, batch_size), 
	FOREIGN KEY(job_name) REFERENCES wattwise_jobs (name) ON DELETE CASCADE
);
INSERT INTO "wattwise_power_limits" VALUES('bert/squad',32,200.0);
INSERT INTO "wattwise_power_limits" VALUES('bert/squad',16,200.0);
INSERT INTO "wattwise_power_limits" VALUES('bert/squad',64,200.0);
INSERT INTO "wattwise_power_limits" VALUES('team.a/resnet50@v2',256,275.5);
INSERT INTO "wattwise_power_limits" VALUES('team.a/resnet50@v2',128,275.5);
CREATE TABLE wattwise_runs (
	id INTEGER NOT NULL, 
	job_name VARCHAR(128) NOT NULL, 
	batch_size INTEGER NOT NULL, 
	phase VARCHAR(16) NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	power_limit_w DOUBLE, 
	cost_limit DOUBLE, 
	epochs INTEGER NOT NULL, 
	energy_j DOUBLE, 
	time_s DOUBLE, 
	cost DOUBLE, 
	started_at_s DOUBLE NOT NULL, 
	updated_at_s DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(job_name) REFERENCES wattwise_jobs (name) ON DELETE CASCADE
);
INSERT INTO "wattwise_runs" VALUES(2,'bert/squad',32,'explore','reached',200.0,NULL,4,600000.0,2049.0,556125.0,1700000111.0,1700000333.0);
INSERT INTO "wattwise_runs" VALUES(3,'bert/squad',16,'explore','reached',200.0,1112250.0,3,450000.0,1536.75,417093.75,1700000370.0,1700000555.0);
INSERT INTO "wattwise_runs" VALUES(4,'bert/squad',64,'explore','failed',200.0,834187.5,6,900000.0,3073.5,834187.5,1700000592.0,1700000888.0);
INSERT INTO "wattwise_runs" VALUES(5,'bert/squad',16,'exploit','reached',200.0,834187.5,3,450000.0,1536.75,417093.75,1700000925.0,1700001110.0);
INSERT INTO "wattwise_runs" VALUES(6,'bert/squad',16,'exploit','open',200.0,834187.5,1,150000.0,512.25,139031.25,1700001147.0,1700001221.0);
INSERT INTO "wattwise_runs" VALUES(7,'team.a/resnet50@v2',256,'explore','reached',275.5,NULL,4,600000.0,2049.0,1901160.0,1700001295.0,1700001517.0);
INSERT INTO "wattwise_runs" VALUES(8,'team.a/resnet50@v2',128,'explore','reached',275.5,4752900.0,3,450000.0,1536.75,1425870.0,1700001554.0,1700001739.0);
INSERT INTO "wattwise_runs" VALUES(9,'team.a/resnet50@v2',128,'exploit','reached',275.5,3564675.0,7,1050000.0,3585.75,3327030.0,1700001776.0,1700002109.0);
INSERT INTO "wattwise_runs" VALUES(10,'team.a/resnet50@v2',256,'exploit','reached',275.5,3564675.0,3,450000.0,1536.75,1425870.0,1700002146.0,1700002331.0);
INSERT INTO "wattwise_runs" VALUES(11,'team.a/resnet50@v2',256,'exploit','open',275.5,3564675.0,1,150000.0,512.25,475290.0,1700002368.0,1700002442.0);
CREATE TABLE wattwise_schema_version (
	version INTEGER NOT NULL
);
INSERT INTO "wattwise_schema_version" VALUES(1);
CREATE INDEX ix_wattwise_runs_job_name_id ON wattwise_runs (job_name, id);
COMMIT;
